"""What the console tests share: a private cosmolite, the order fulfilment
workflow on it with known orders (completed, cancelled, parked, hostile ids),
`sagafeed run --http` (and `sagafeed console`) serving the console.

Not a test itself (tests.cmake runs test_*.py). Needs Debian's
python3-azure-cosmos to seed the data (skips with 77 without it).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from sf_cosmolite import KEY, Cosmolite  # noqa: E402  (exits 77 without azure-cosmos)

import azure.cosmos.cosmos_client as cosmos_client  # noqa: E402

STATUSES = ["running", "waiting", "compensating", "completed", "cancelled", "parked"]
TOKEN = "console-test-token-0123456789"
HOSTILE_SCRIPT = "<script>alert(1)</script>"  # a partition key value (ids cannot hold '/')
HOSTILE_IMG = '"><img src=x onerror=alert(2)>'  # an order id
SOURCE = os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))


def workflows_text():
    """The workflows section of the example configuration, as it is."""
    with open(os.path.join(SOURCE, "config", "examples", "order-fulfilment.cfg")) as f:
        text = f.read()
    return text[text.index("workflows = ("):]


def order(oid, customer, lines, total, status="placed"):
    return {"id": oid, "type": "order", "customerId": customer, "status": status,
            "lines": lines, "total": total}


GOOD = [{"sku": "p-1", "category": "books", "qty": 1}]


class World:
    """cosmolite + the shop's containers and orders + `sagafeed run --http`."""

    def __init__(self, token=True, orders=None, extra_workflow=None):
        self.tmp = tempfile.TemporaryDirectory(prefix="sf-console-")
        self.cosmo = Cosmolite()
        self.procs = []
        self.logs = []
        self.client = cosmos_client.CosmosClient(self.cosmo.endpoint, {"masterKey": KEY})
        self.client.CreateDatabase({"id": "shop"})
        for name, pk in (("orders", "/customerId"), ("products", "/category"),
                         ("customers", "/customerId"), ("shipments", "/orderId"),
                         ("parked", "/parkKey"), ("leases", "/id")):
            spec = {"id": name, "partitionKey": {"paths": [pk], "kind": "Hash"}}
            if name != "parked":  # TTL on where sagafeed's records carry one (`sagafeed init`)
                spec["defaultTtl"] = -1
            self.client.CreateContainer("dbs/shop", spec)
        self.upsert("products", {"id": "p-1", "category": "books", "price": 10,
                                 "stock": 1000, "type": "product"})
        for cid, bal in (("c-1", 1000), ("c-2", 1), ("c-3", 1000), (HOSTILE_SCRIPT, 1000)):
            self.upsert("customers", {"id": cid.replace("/", "_"), "customerId": cid,
                                      "balance": bal, "type": "customer"})
        self.cfg = os.path.join(self.tmp.name, "console.cfg")
        with open(self.cfg, "w") as f:
            f.write(
                'cosmos = { endpoint = "%s"; key_env = "SF_TEST_KEY"; database = "shop"; };\n'
                'feed = { lease_container = "leases"; lease_prefix = "orders"; '
                'start = "beginning"; poll_interval = "100ms"; lease_expiry = "10s"; '
                'renew_interval = "1s"; acquire_interval = "500ms"; };\n'
                'processor = { parking_container = "parked"; park_scan_interval = "200ms"; '
                'max_attempts = 2; backoff_base = "10ms"; backoff_cap = "50ms"; '
                'log_level = "info"; };\n'
                'console = { %s page_size_max = 50; };\n%s'
                % (self.cosmo.endpoint, 'admin_token_env = "SF_TEST_TOKEN";' if token else "",
                   workflows_text() if extra_workflow is None else
                   workflows_text().rstrip().rstrip(");").rstrip() + ",\n" + extra_workflow +
                   "\n);\n"))
        self.env = dict(os.environ, SF_TEST_KEY=KEY, SF_TEST_TOKEN=TOKEN)
        for o in orders if orders is not None else self.default_orders():
            self.upsert("orders", o)

    @staticmethod
    def default_orders():
        return [order("o-1", "c-1", GOOD, 5), order("o-2", "c-1", GOOD, 5),
                order("o-poor", "c-2", GOOD, 50),  # insufficient balance: cancelled
                order("o-bad", "c-3", "oops", 5),  # lines not an array: parked
                order(HOSTILE_IMG, HOSTILE_SCRIPT, GOOD, 5)]

    def start(self, command="run"):
        """Starts `sagafeed run` (or `console`) with --http on a free port; returns its base URL."""
        log = os.path.join(self.tmp.name, "%s-%d.log" % (command, len(self.procs)))
        args = [os.environ["SF_SAGAFEED_BIN"], command, "-c", self.cfg, "--http", "127.0.0.1:0"]
        if command == "run":
            args += ["--log-text", "--instance", "console-test"]
        with open(log, "w") as out:
            p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.procs.append(p)
        self.logs.append(log)
        deadline = time.monotonic() + 30
        pat = re.compile(r"port (\d+)")
        while time.monotonic() < deadline:
            with open(log) as f:
                text = f.read()
            m = pat.search(text)
            if m:
                return "http://127.0.0.1:%s" % m.group(1)
            if p.poll() is not None:
                raise RuntimeError("sagafeed %s exited: %s" % (command, text))
            time.sleep(0.05)
        raise RuntimeError("sagafeed %s did not serve within 30 s: %s" % (command, open(log).read()))

    def upsert(self, coll, doc):
        self.client.UpsertItem("dbs/shop/colls/" + coll, doc)

    def query(self, coll, sql, params=(), pk=None):
        q = {"query": sql, "parameters": [{"name": n, "value": v} for n, v in params]}
        opts = {"partitionKey": pk} if pk is not None else {"enableCrossPartitionQuery": True}
        return list(self.client.QueryItems("dbs/shop/colls/" + coll, q, opts))

    def item(self, oid, customer):
        rows = self.query("orders", "SELECT * FROM c WHERE c.id = @id", [("@id", oid)], customer)
        return rows[0] if rows else None

    def state(self, oid, customer):
        it = self.item(oid, customer)
        return it.get("status") if it else None

    def wait_state(self, oid, customer, want, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.state(oid, customer) == want:
                return True
            time.sleep(0.1)
        return False

    def parked_records(self):
        return self.query("parked", "SELECT * FROM c")

    def wait_parked(self, n, seconds=60):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if len([p for p in self.parked_records() if p.get("status") == "parked"]) == n:
                return True
            time.sleep(0.1)
        return False

    def settle(self):
        """Waits for the default orders' outcomes."""
        assert self.wait_state("o-1", "c-1", "completed"), "o-1 did not complete"
        assert self.wait_state("o-2", "c-1", "completed"), "o-2 did not complete"
        assert self.wait_state("o-poor", "c-2", "cancelled"), "o-poor was not cancelled"
        # The hostile customer's key has a '/', which no Cosmos id may hold: its charge
        # patch is refused (400), so the order is parked after its reservation.
        assert self.wait_parked(2), "o-bad and the hostile order were not both parked: %s" % (
            self.parked_records())

    def stop(self):
        """Stops everything; raises when a sagafeed did not exit cleanly or a sanitizer spoke."""
        problems = []
        for p, log in zip(self.procs, self.logs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            with open(log) as f:
                text = f.read()
            if p.returncode != 0 or "Sanitizer" in text or "runtime error" in text:
                problems.append("%s exited %d:\n%s" % (log, p.returncode, text[-4000:]))
        self.cosmo.stop()
        self.tmp.cleanup()
        if problems:
            raise RuntimeError("\n".join(problems))


def http(method, url, body=None, headers=None):
    """(status, parsed JSON or text) of one request; never raises on an HTTP status."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw, status, ctype = r.read(), r.status, r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        raw, status, ctype = e.read(), e.code, e.headers.get("Content-Type", "")
    return status, (json.loads(raw) if ctype.startswith("application/json") else raw.decode())
