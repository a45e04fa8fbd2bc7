#!/usr/bin/env python3
"""The monitoring files against a running sagafeed, with the real tools.

A small workload on loopback: sagafeed-kafka-mock, a cosmolite seeded by
`sagafeed demo` (products, customers, settled orders), more orders written
through cosmolite's REST API, and `sagafeed run --http 127.0.0.1:0` with the
order-fulfilment example and its Kafka relays. Then, by --check:

  dashboard   every metric that packaging/grafana/sagafeed-dashboard.json and
              packaging/prometheus/sagafeed.rules.yml query is one this
              sagafeed exports (read from its /metrics, not from a list here;
              `up` is Prometheus' own)
  logs        every line sagafeed logged is JSON with exactly the fields
              docs/operations.md ("Logs") documents, components included
  prometheus  Debian's prometheus server scrapes that /metrics (its own
              ephemeral loopback port, a temporary TSDB) while orders flow,
              and its HTTP API answers the saga counters; it loads the alert
              rules, and every dashboard query is valid PromQL to it. Without
              the prometheus binary: skipped (exit 77), with a message.

Environment: SF_SOURCE_DIR, SF_SAGAFEED_BIN, SF_COSMOLITE_BIN, SF_KAFKA_MOCK_BIN,
PROMETHEUS (optional: the server binary, default `prometheus` on PATH).
Exit status 0 when every check passed, 1 otherwise, 77 when skipped.
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import EMU_KEY, SRC, check, cosmos_request, failures, free_port  # noqa: E402



def need_bin(var):
    path = os.environ.get(var)
    if not path or not os.access(path, os.X_OK):
        print(f"FAIL: {var} is not set to an executable", file=sys.stderr)
        sys.exit(1)
    return path


def wait_for(what, fn, timeout_s, every_s=0.2):
    """fn() until it returns a true value; that value, or None after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(every_s)
    print(f"timed out after {timeout_s}s waiting for {what}", flush=True)
    return None


def http_get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def die_with_parent():
    """In the child: SIGKILL when the test dies (a ctest timeout), so no server outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Procs:
    """Children started by the test, stopped in reverse order whatever happens."""

    def __init__(self):
        self.items = []

    def start(self, name, argv, log, env=None, stdout=None):
        f = open(log, "ab")
        p = subprocess.Popen(argv, stdout=stdout or f, stderr=f, stdin=subprocess.DEVNULL,
                             env={**os.environ, **(env or {})}, preexec_fn=die_with_parent)
        self.items.append((name, p, f))
        return p

    def stop(self, p, timeout=30):
        """SIGTERM, then the exit status (SIGKILL after timeout: -9)."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode

    def stop_all(self):
        for _, p, f in reversed(self.items):
            self.stop(p)
            f.close()


def create_orders(endpoint, first, n):
    """Orders o-<first>.. in shop/orders, the shape of tests/support/e2e.c's."""
    for i in range(first, first + n):
        cust = f"c-{i % 9:03d}"
        doc = {"id": f"o-{i}", "type": "order", "customerId": cust, "status": "placed",
               "lines": [{"sku": "p-00", "category": "books", "qty": 1, "price": 5}], "total": 5}
        st = cosmos_request(endpoint, "POST", "docs", "dbs/shop/colls/orders",
                            "/dbs/shop/colls/orders/docs", doc, cust)
        if not check(st == 201, f"creating order o-{i}: HTTP {st}"):
            return False
    return True


def edit(text, frm, to):
    if frm not in text:
        raise SystemExit(f"FAIL: the example has no {frm!r} to edit")
    return text.replace(frm, to, 1)


def parse_metrics(text):
    """{family or sample name: [(labels, value)]} of a Prometheus text page."""
    out = {}
    for ln in text.splitlines():
        m = re.match(r"^# TYPE (\S+) (\S+)", ln)
        if m:
            out.setdefault(m.group(1), [])
            continue
        if not ln or ln.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$", ln)
        if check(m is not None, f"/metrics: unparsable line {ln!r}") and m:
            out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return out


def total(metrics, name, label_re=""):
    return sum(v for labels, v in metrics.get(name, []) if re.search(label_re, labels))


PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                "unless", "offset", "inf", "nan"}


def metric_names(expr):
    """The metric names a PromQL expression selects (functions, labels, keywords left out)."""
    e = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)                 # string literals
    e = re.sub(r"\{[^}]*\}", "", e)                                # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                               # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    e = re.sub(r"\$\w+", "", e)                                    # dashboard variables
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        rest = e[m.end():].lstrip()
        word = m.group(0)
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        if re.fullmatch(r"[0-9.]+[smhdwy]?", word):
            continue
        names.add(word)
    return names


def dashboard_exprs():
    d = json.load(open(os.path.join(SRC, "packaging/grafana/sagafeed-dashboard.json"), encoding="utf-8"))
    exprs = []
    for p in d.get("panels", []):
        for t in p.get("targets", []):
            exprs.append((p.get("title", "?"), t["expr"]))
    for v in d.get("templating", {}).get("list", []):
        q = v.get("query")
        if isinstance(q, dict):
            q = q.get("query")
        m = re.match(r"label_values\((\w+)", q or "") or re.match(r"query_result\((.+)\)$", q or "")
        if m:
            exprs.append((f"variable {v['name']}", m.group(1)))
    return exprs


def alert_rule_count():
    """How many alerts the rules file defines: Prometheus must load every one."""
    text = open(os.path.join(SRC, "packaging/prometheus/sagafeed.rules.yml"), encoding="utf-8").read()
    return sum(1 for line in text.split("\n") if line.strip().startswith("- alert:"))


def rule_exprs():
    """The expr: of every rule (the file's own layout: `expr: X` or `expr: |` + lines)."""
    lines = open(os.path.join(SRC, "packaging/prometheus/sagafeed.rules.yml"), encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)expr: (.*)$", lines[i])
        if m:
            if m.group(2).strip() == "|":
                body, i = [], i + 1
                while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > len(m.group(1))):
                    body.append(lines[i].strip())
                    i += 1
                out.append(" ".join(body))
                continue
            out.append(m.group(2))
        i += 1
    return out


def workload(tmp, procs):
    """Starts everything; returns (cosmos endpoint, metrics port, sagafeed process, its log)."""
    sagafeed, cosmolite, kmock = (need_bin("SF_SAGAFEED_BIN"), need_bin("SF_COSMOLITE_BIN"),
                                  need_bin("SF_KAFKA_MOCK_BIN"))
    data = os.path.join(tmp, "cosmos")
    r = subprocess.run([sagafeed, "demo", "--orders", "20", "--data", data, "--timeout", "120s"],
                       capture_output=True, text=True, timeout=300)
    if not check(r.returncode == 0, f"sagafeed demo (the seed) failed:\n{r.stdout}{r.stderr}"):
        return None
    kport_file = os.path.join(tmp, "kafka.port")
    procs.start("kafka-mock", [kmock, "--port-file", kport_file], os.path.join(tmp, "kafka.log"))
    kport = wait_for("the kafka mock", lambda: os.path.exists(kport_file) and open(kport_file).read().strip(), 30)
    cport_file = os.path.join(tmp, "cosmolite.port")
    procs.start("cosmolite", [cosmolite, "--listen", "127.0.0.1:0", "--data", data, "--port-file", cport_file,
                              "--log-level", "warn"], os.path.join(tmp, "cosmolite.log"))
    cport = wait_for("cosmolite", lambda: os.path.exists(cport_file) and open(cport_file).read().strip(), 30)
    if not check(kport and cport, "the kafka mock or cosmolite did not start"):
        return None
    endpoint = f"http://127.0.0.1:{cport}"
    text = open(os.path.join(SRC, "config/examples/order-fulfilment.cfg"), encoding="utf-8").read()
    text = edit(text, 'database = "shop";', f'endpoint = "{endpoint}"; key_env = "SF_TEST_KEY"; database = "shop";')
    text, n = re.subn(r"\nembedded = \{[^}]*\};\n", "\n", text)  # the endpoint replaces it
    check(n == 1, "the example has no embedded section to remove")
    text = edit(text, 'lease_prefix = "orders";', 'lease_prefix = "observe";')
    text = edit(text, 'acquire_interval = "5s";', 'acquire_interval = "300ms";')
    text = edit(text, 'log_json = true;', 'log_json = true; http_listen = "127.0.0.1:0";')
    text = edit(text, 'brokers = "localhost:9092";', f'brokers = "127.0.0.1:{kport}";')
    text = edit(text, 'lease_prefix = "orders-kafka";', 'lease_prefix = "observe-kafka";')
    cfg = os.path.join(tmp, "observe.cfg")
    open(cfg, "w", encoding="utf-8").write(text)
    if not create_orders(endpoint, 100, 20):
        return None
    log = os.path.join(tmp, "sagafeed.log")
    p = procs.start("sagafeed", [sagafeed, "run", "-c", cfg, "--instance", "observe"], log,
                    env={"SF_TEST_KEY": EMU_KEY})

    def port():
        if p.poll() is not None:
            return -1
        m = re.search(r"serving /metrics.*?\(port (\d+)\)", open(log, encoding="utf-8", errors="replace").read())
        return m and int(m.group(1))

    mport = wait_for("sagafeed's /metrics", port, 60)
    if not check(mport and mport > 0, "sagafeed serves no /metrics:\n" + open(log, errors="replace").read()[-3000:]):
        return None
    return endpoint, mport, p, log


def scrape(mport):
    st, body = http_get(f"http://127.0.0.1:{mport}/metrics")
    return parse_metrics(body) if st == 200 else {}


def check_dashboard_layout():
    """What Grafana needs to import the file: unique panel ids and titles, panels
    on the 24-column grid without overlap, every query on the datasource
    variable with its own refId."""
    d = json.load(open(os.path.join(SRC, "packaging/grafana/sagafeed-dashboard.json"), encoding="utf-8"))
    panels = d.get("panels", [])
    check(d.get("uid") and d.get("title") and isinstance(d.get("schemaVersion"), int), "dashboard lacks uid, title or schemaVersion")
    check(any(v.get("type") == "datasource" and v.get("name") == "datasource"
              for v in d.get("templating", {}).get("list", [])), "dashboard has no datasource variable")
    check(len({p.get("id") for p in panels}) == len(panels), "panel ids are not unique")
    check(len({p.get("title") for p in panels}) == len(panels), "panel titles are not unique")
    cells = set()
    for p in panels:
        g = p.get("gridPos", {})
        t = p.get("title")
        if not check(all(isinstance(g.get(k), int) for k in "xywh") and g["x"] + g["w"] <= 24,
                     f"panel '{t}': gridPos {g} is off the 24-column grid"):
            continue
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        check(not (mine & cells), f"panel '{t}' overlaps another")
        cells |= mine
        check(p.get("datasource", {}).get("uid") == "${datasource}", f"panel '{t}' is not on ${{datasource}}")
        refs = [x.get("refId") for x in p.get("targets", [])]
        check(refs and len(set(refs)) == len(refs) and all(x.get("expr") for x in p["targets"]),
              f"panel '{t}': no queries, or refIds not unique")
    # Issue 25 item 10: the picker names instances by sagafeed_instance (not the
    # scrape address Prometheus' own `instance` label holds) and maps each to its
    # target; the 429 panel counts every attempt the client absorbed too; RU/s by
    # container.
    var = next((v for v in d.get("templating", {}).get("list", []) if v.get("name") == "instance"), {})
    q = var.get("query", {}).get("query") if isinstance(var.get("query"), dict) else var.get("query")
    check(q == "query_result(sagafeed_info)" and "sagafeed_instance=" in var.get("regex", "")
          and "(?<text>" in var.get("regex", "") and "(?<value>" in var.get("regex", ""),
          f"instance variable does not name instances by sagafeed_instance: {q} {var.get('regex')}")
    rx = re.compile(var.get("regex", "/x/")[1:-1].replace("(?<", "(?P<"))
    sample = 'sagafeed_info{instance="10.0.0.7:9464", job="sagafeed", sagafeed_instance="w-1", version="0.1.0"} 1'
    mm = rx.search(sample)
    check(mm is not None and mm.group("value") == "10.0.0.7:9464" and mm.group("text") == "w-1",
          f"instance variable's regex on {sample}: {mm and mm.groupdict()}")
    exprs = [x.get("expr", "") for p in panels for x in p.get("targets", [])]
    check(any("sagafeed_cosmos_throttled_total" in e for e in exprs), "no panel counts every 429 attempt")
    check(any("sum by (container)" in e and "sagafeed_cosmos_request_charge_total" in e for e in exprs),
          "no RU/s by container panel")


def check_dashboard(mport):
    check_dashboard_layout()
    # The sagas count once settled; the relays report as soon as their feeds run.
    m = wait_for("the 20 sagas in /metrics",
                 lambda: (lambda x: x if total(x, "sagafeed_sagas_total") >= 20 else None)(scrape(mport)),
                 120, 0.5)
    if not check(m, "the 20 sagas did not settle"):
        return
    m = wait_for("the Kafka relays in /metrics",
                 lambda: (lambda x: x if x.get("sagafeed_relay_lag_items") else None)(scrape(mport)), 20, 0.5) or m
    exported = set(m)
    print(f"sagafeed exports {len(exported)} metric families")
    for where, exprs in (("dashboard", dashboard_exprs()), ("alert rules", [("rule", e) for e in rule_exprs()])):
        check(len(exprs) >= 7, f"{where}: too few queries found ({len(exprs)})")
        used = set()
        for title, e in exprs:
            for name in metric_names(e):
                used.add(name)
                check(name in exported or name == "up", f"{where}: '{title}' queries {name}, which sagafeed does not export")
        print(f"{where}: {len(exprs)} queries over {len(used)} metrics: {', '.join(sorted(used))}")
    # the metric names were really found: the extractor must not come back empty-handed
    check(metric_names('sum by (a) (rate(x_total{b="c"}[5m])) / on (d) y') == {"x_total", "y"},
          "the PromQL name extractor is wrong")


def check_log(log):
    """Every line of the run's stderr is a JSON object with exactly the fields
    docs/operations.md ("Logs") documents, and every component it names is there."""
    ops = open(os.path.join(SRC, "docs/operations.md"), encoding="utf-8").read()
    logs = ops.split("\n## Logs\n", 1)[-1].split("\n## ", 1)[0]
    fields = re.findall(r"^\| `(\w+)` \|", logs, re.M)
    check(fields == ["ts", "level", "comp", "msg"], f"docs/operations.md Logs documents the fields {fields}")
    comp_row = next((ln for ln in logs.splitlines() if ln.startswith("| `comp` |")), "")
    n, comps = 0, set()
    for ln in open(log, encoding="utf-8", errors="replace"):
        n += 1
        try:
            rec = json.loads(ln)
        except ValueError:
            check(False, f"log line {n} is not JSON: {ln[:200]!r}")
            continue
        check(isinstance(rec, dict) and sorted(rec) == sorted(fields), f"log line {n} has fields {sorted(rec)}")
        check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(rec.get("ts"))) is not None,
              f"log line {n}: ts {rec.get('ts')!r} is not RFC 3339 UTC with milliseconds")
        check(rec.get("level") in ("debug", "info", "warn", "error"), f"log line {n}: level {rec.get('level')!r}")
        comps.add(rec.get("comp"))
    check(n > 10, f"only {n} log lines")
    for c in comps:
        check(f"`{c}`" in comp_row, f"log component {c!r} is not documented in docs/operations.md Logs")
    print(f"log: {n} JSON lines, fields {fields}, components {sorted(comps)}")


def prom_query(pport, q):
    st, body = http_get(f"http://127.0.0.1:{pport}/api/v1/query?" + urllib.parse.urlencode({"query": q}))
    try:
        return st, json.loads(body)
    except ValueError:
        return st, {"status": "error", "error": body}


def check_prometheus(tmp, procs, endpoint, mport):
    prom = os.environ.get("PROMETHEUS") or shutil.which("prometheus")
    if not prom:
        print("SKIP: no prometheus binary (apt-get install prometheus); the scrape test did not run")
        return 77
    pport = free_port()
    rules = os.path.join(SRC, "packaging/prometheus/sagafeed.rules.yml")
    conf = os.path.join(tmp, "prometheus.yml")
    open(conf, "w").write(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        "scrape_configs:\n  - job_name: sagafeed\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{mport}']\n")
    p = procs.start("prometheus", [prom, f"--config.file={conf}", f"--storage.tsdb.path={tmp}/tsdb",
                                   f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"],
                    os.path.join(tmp, "prometheus.log"))
    if not check(wait_for("prometheus ready", lambda: http_get(f"http://127.0.0.1:{pport}/-/ready")[0] == 200, 60),
                 "prometheus did not get ready:\n" + open(os.path.join(tmp, "prometheus.log"), errors="replace").read()[-3000:]):
        return 1
    # More orders while Prometheus scrapes: the counters must move in its TSDB.
    create_orders(endpoint, 200, 20)

    def sagas():
        st, r = prom_query(pport, 'sum(sagafeed_sagas_total{job="sagafeed"})')
        res = r.get("data", {}).get("result", [])
        return res and float(res[0]["value"][1]) >= 40 and float(res[0]["value"][1])

    n = wait_for("prometheus to see 40 settled sagas", sagas, 120, 1)
    check(n, "prometheus never saw the 40 sagas in sagafeed_sagas_total")
    if n:
        print(f"prometheus: sum(sagafeed_sagas_total) = {n:g}")
    st, r = prom_query(pport, 'up{job="sagafeed"}')
    check(st == 200 and r["data"]["result"] and r["data"]["result"][0]["value"][1] == "1",
          f"up{{job=\"sagafeed\"}} is not 1: {r}")
    st, r = prom_query(pport, 'sum by (outcome) (sagafeed_steps_total{outcome="applied"})')
    check(st == 200 and r["data"]["result"] and float(r["data"]["result"][0]["value"][1]) > 0,
          f"no applied steps in prometheus: {r}")
    st, body = http_get(f"http://127.0.0.1:{pport}/api/v1/rules")
    groups = json.loads(body)["data"]["groups"] if st == 200 else []
    rules_loaded = [x for g in groups for x in g["rules"]]
    want = alert_rule_count()
    check(len(rules_loaded) == want and
          all(x.get("health") in ("ok", "unknown") for x in rules_loaded),
          f"prometheus did not load the {want} alert rules healthy: {body[:2000]}")
    for title, e in dashboard_exprs():
        q = e.replace("$__rate_interval", "1m").replace("$instance", ".*")
        st, r = prom_query(pport, q)
        check(st == 200 and r.get("status") == "success", f"dashboard '{title}': {q}: {r.get('error')}")
    code = procs.stop(p)
    check(code == 0, f"prometheus exited {code} on SIGTERM")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", choices=["dashboard", "logs", "prometheus"], required=True)
    a = ap.parse_args()
    if a.check == "prometheus" and not (os.environ.get("PROMETHEUS") or shutil.which("prometheus")):
        print("SKIP: no prometheus binary (apt-get install prometheus); the scrape test did not run")
        return 77
    tmp = tempfile.mkdtemp(prefix=f"sf-observe-{a.check}-")
    procs = Procs()
    status = 0
    try:
        w = workload(tmp, procs)
        if w is not None:
            endpoint, mport, p, log = w
            if a.check == "dashboard":
                check_dashboard(mport)
            elif a.check == "logs":
                wait_for("the 20 sagas", lambda: total(scrape(mport), "sagafeed_sagas_total") >= 20, 120, 0.5)
            else:
                status = check_prometheus(tmp, procs, endpoint, mport)
            code = procs.stop(p)
            check(code == 0, f"sagafeed run exited {code} on SIGTERM:\n" + open(log, errors="replace").read()[-3000:])
            check("AddressSanitizer" not in open(log, errors="replace").read(), "sanitizer report in the sagafeed log")
            if a.check == "logs" and code == 0:
                check_log(log)
    finally:
        procs.stop_all()
    if failures:
        print(f"{len(failures)} failure(s); files kept in {tmp}")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"observe {a.check}: all checks passed")
    return status


if __name__ == "__main__":
    sys.exit(main())
