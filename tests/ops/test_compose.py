#!/usr/bin/env python3
"""Checks the packaging without Docker: docker-compose.yml, the Dockerfile
and what they reference, the container configuration (with sagafeed's own
check-config, under the environment compose gives it), the systemd unit and
the docs.

docker-compose.yml is parsed twice: by a small line-based parser of the
YAML subset compose files use (block maps and lists, flow lists, quoted
scalars, anchors and << merges), and by PyYAML when it is installed; both
must agree, so the check works on machines without PyYAML.

Environment: SF_SOURCE_DIR (the source tree), SF_SAGAFEED_BIN (the binary).
Exit status 0 when every check passed, 1 otherwise (each failure printed).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import SRC, check, failures  # noqa: E402

SAGAFEED = os.environ.get("SF_SAGAFEED_BIN")


# ---------------------------------------------------------------------------
# A small YAML subset parser
# ---------------------------------------------------------------------------


class YamlError(Exception):
    pass


def strip_comment(s):
    out, quote = [], None
    for i, c in enumerate(s):
        if quote:
            if c == "\\" and quote == '"':
                out.append(c)
                continue
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or s[i - 1] in " \t"):
            break
        out.append(c)
    return "".join(out).rstrip()


def split_flow(s):
    items, cur, quote, esc = [], [], None, False
    for c in s:
        if esc:
            cur.append(c)
            esc = False
        elif quote:
            cur.append(c)
            if c == "\\" and quote == '"':
                esc = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            cur.append(c)
        elif c == ",":
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        items.append("".join(cur).strip())
    return items


def scalar(s, anchors):
    s = s.strip()
    if s.startswith("*"):
        if s[1:] not in anchors:
            raise YamlError("unknown alias " + s)
        return anchors[s[1:]]
    if s.startswith("[") and s.endswith("]"):
        return [scalar(x, anchors) for x in split_flow(s[1:-1])]
    if len(s) >= 2 and s[0] == '"' and s[-1] == '"':
        return bytes(s[1:-1], "utf-8").decode("unicode_escape")
    if len(s) >= 2 and s[0] == "'" and s[-1] == "'":
        return s[1:-1].replace("''", "'")
    if s in ("true", "false"):
        return s == "true"
    if re.fullmatch(r"-?[0-9]+", s):
        return int(s)
    if s in ("null", "~", ""):
        return None
    return s


def split_key(content):
    """'key: rest' -> (key, rest) outside quotes, or None."""
    m = re.match(r'^("[^"]*"|\'[^\']*\'|[^:#]+?)\s*:(\s+(.*)|$)', content)
    if not m:
        return None
    key = m.group(1)
    if key[0] in "\"'":
        key = key[1:-1]
    return key, (m.group(3) or "")


def parse_yaml(text):
    lines = []
    for raw in text.splitlines():
        if raw.strip() == "---":
            continue
        s = strip_comment(raw)
        if not s.strip():
            continue
        if "\t" in s[: len(s) - len(s.lstrip())]:
            raise YamlError("tab indentation: " + raw)
        lines.append((len(s) - len(s.lstrip(" ")), s.strip()))
    anchors = {}
    pos = [0]

    def block(indent):
        if pos[0] >= len(lines):
            return None
        if lines[pos[0]][1].startswith("- ") or lines[pos[0]][1] == "-":
            return seq(lines[pos[0]][0])
        return mapping(lines[pos[0]][0])

    def value_after(rest, indent):
        anchor = None
        if rest.startswith("&"):
            anchor, _, rest = rest.partition(" ")
            anchor = anchor[1:]
        if rest.strip():
            v = scalar(rest, anchors)
        elif pos[0] < len(lines) and lines[pos[0]][0] > indent:
            v = block(lines[pos[0]][0])
        elif pos[0] < len(lines) and lines[pos[0]][0] == indent and lines[pos[0]][1].startswith("- "):
            v = seq(indent)  # a list at the key's own indentation
        else:
            v = None
        if anchor:
            anchors[anchor] = v
        return v

    def mapping(indent):
        out = {}
        while pos[0] < len(lines) and lines[pos[0]][0] == indent:
            content = lines[pos[0]][1]
            if content.startswith("- "):
                break
            kv = split_key(content)
            if kv is None:
                raise YamlError("not a key: " + content)
            pos[0] += 1
            key, rest = kv
            v = value_after(rest, indent)
            if key == "<<":
                if not isinstance(v, dict):
                    raise YamlError("<< of a non-map")
                for k, x in v.items():
                    out.setdefault(k, x)
            else:
                if key in out:
                    raise YamlError("duplicate key " + key)
                out[key] = v
        if pos[0] < len(lines) and lines[pos[0]][0] > indent:
            raise YamlError("bad indentation: " + lines[pos[0]][1])
        return out

    def seq(indent):
        out = []
        while pos[0] < len(lines) and lines[pos[0]][0] == indent and (
            lines[pos[0]][1].startswith("- ") or lines[pos[0]][1] == "-"
        ):
            item = lines[pos[0]][1][1:].strip()
            pos[0] += 1
            kv = split_key(item) if not item.startswith(("\"", "'", "[")) else None
            if kv is not None and not re.match(r"^[^ ]+:[^ ]", item):
                # "- key: value": a map item; its other keys are indented under it
                key, rest = kv
                m = {key: scalar(rest, anchors)} if rest else {}
                if pos[0] < len(lines) and lines[pos[0]][0] > indent:
                    m.update(mapping(lines[pos[0]][0]))
                out.append(m)
            else:
                out.append(scalar(item, anchors))
        return out

    doc = block(0)
    if pos[0] != len(lines):
        raise YamlError("trailing content: " + lines[pos[0]][1])
    return doc


def normalize(v):
    """PyYAML and the subset parser agree on everything but number/boolean spelling."""
    if isinstance(v, dict):
        return {str(k): normalize(x) for k, x in v.items()}
    if isinstance(v, list):
        return [normalize(x) for x in v]
    if isinstance(v, bool):
        return "true" if v else "false"
    return None if v is None else str(v)


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


def env_of(svc):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def compose_checks():
    path = os.path.join(SRC, "docker-compose.yml")
    text = open(path, encoding="utf-8").read()
    doc = parse_yaml(text)
    try:
        import yaml  # noqa: PLC0415

        check(normalize(yaml.safe_load(text)) == normalize(doc),
              "the subset parser and PyYAML disagree on docker-compose.yml")
    except ImportError:
        print("note: PyYAML is not installed; the subset parser alone checked the file")
    services = doc.get("services") or {}
    for name in ("cosmosdb", "kafka", "cosmos-init", "sagafeed"):
        check(name in services, f"service {name} missing")
    if not all(n in services for n in ("cosmosdb", "kafka", "sagafeed")):
        return None
    check(str(services["cosmosdb"].get("image", "")).startswith(
        "mcr.microsoft.com/cosmosdb/linux/azure-cosmos-emulator"),
        "cosmosdb does not run the official Linux emulator image")
    kenv = env_of(services["kafka"])
    roles = kenv.get("KAFKA_PROCESS_ROLES", "")
    check("broker" in roles and "controller" in roles, "kafka is not in KRaft mode (process roles)")
    check("KAFKA_CONTROLLER_QUORUM_VOTERS" in kenv, "kafka has no controller quorum")
    check(not any("zookeeper" in n or "zookeeper" in str(s.get("image", ""))
                  for n, s in services.items()), "a ZooKeeper service: KRaft needs none")
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        for dep in (deps if isinstance(deps, (list, dict)) else []):
            check(dep in services, f"{name} depends on unknown service {dep}")
        for vol in svc.get("volumes") or []:
            host = str(vol).split(":", 1)[0]
            if host.startswith((".", "/")):
                check(os.path.exists(os.path.join(SRC, host)), f"{name}: volume source {host} missing")
        if "build" in svc:
            build = svc["build"]
            ctx = os.path.join(SRC, build.get("context", ".") if isinstance(build, dict) else build)
            check(os.path.isdir(ctx), f"{name}: build context {ctx} missing")
            dockerfile = os.path.join(ctx, build.get("dockerfile", "Dockerfile")
                                      if isinstance(build, dict) else "Dockerfile")
            if check(os.path.isfile(dockerfile), f"{name}: {dockerfile} missing"):
                dockerfile_checks(ctx, dockerfile, build.get("target") if isinstance(build, dict) else None)
    return services["sagafeed"]


def dockerfile_checks(ctx, path, target):
    text = open(path, encoding="utf-8").read()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M | re.I)
    names = [s[1] for s in stages if s[1]]
    check(len(stages) >= 2, "the Dockerfile is not multi-stage")
    check(all(s[0].startswith("debian:12") for s in stages), "a stage is not Debian 12")
    if target:
        check(target in names, f"build target {target} is not a stage of the Dockerfile")
    for m in re.finditer(r"^COPY\s+(.*)$", text, re.M):
        args = m.group(1).split()
        if any(a.startswith("--from=") for a in args):
            frm = [a for a in args if a.startswith("--from=")][0][7:]
            check(frm in names, f"COPY --from={frm}: no such stage")
            continue
        for src in [a for a in args if not a.startswith("--")][:-1]:
            if src != ".":
                check(os.path.exists(os.path.join(ctx, src)), f"Dockerfile COPY {src}: missing")
    # files the build stage reads by name
    for ref in set(re.findall(r"\b((?:packaging|config)/[\w./-]+)", text)):
        check(os.path.exists(os.path.join(ctx, ref)), f"Dockerfile refers to {ref}: missing")
    check("--target sagafeed cosmolite" in text, "the Dockerfile does not build sagafeed and cosmolite")


def config_checks(svc):
    """The image's configuration under the environment compose gives the sagafeed service."""
    env = env_of(svc)
    check(env.get("SAGAFEED_COSMOS_KEY_ENV") in env,
          "SAGAFEED_COSMOS_KEY_ENV names a variable the service does not set")
    for k in ("SAGAFEED_COSMOS_ENDPOINT", "SAGAFEED_KAFKA_BROKERS"):
        check(k in env, f"sagafeed gets no {k}")
    if not SAGAFEED or not os.access(SAGAFEED, os.X_OK):
        check(False, "SF_SAGAFEED_BIN is not set to the sagafeed binary")
        return
    tmp = tempfile.mkdtemp(prefix="sf-compose-")
    try:
        shutil.copy(os.path.join(SRC, "packaging/docker/sagafeed.cfg"), os.path.join(tmp, "sagafeed.cfg"))
        example = open(os.path.join(SRC, "config/examples/order-fulfilment.cfg"), encoding="utf-8").read()
        at = example.find("\nworkflows = (")
        check(at >= 0, "the example has no top-level workflows list")
        with open(os.path.join(tmp, "order-workflows.cfg"), "w", encoding="utf-8") as f:
            f.write(example[at + 1:])
        base = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFEED_")}
        cfg = os.path.join(tmp, "sagafeed.cfg")
        r = subprocess.run([SAGAFEED, "check-config", cfg], env={**base, **env},
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"check-config of the image's configuration failed:\n{r.stdout}{r.stderr}")
        # the variables really reach the settings: a bad value must be refused
        bad = {**base, **env, "SAGAFEED_COSMOS_ENDPOINT": "ftp://nowhere"}
        r = subprocess.run([SAGAFEED, "check-config", cfg], env=bad, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 1 and "cosmos.endpoint 'ftp://nowhere'" in r.stderr,
              f"SAGAFEED_COSMOS_ENDPOINT does not reach cosmos.endpoint:\n{r.stderr}")
        bad = {**base, **env, "SAGAFEED_KAFKA_BROKERS": ""}
        r = subprocess.run([SAGAFEED, "check-config", cfg], env=bad, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0, "an empty variable must count as unset")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def unit_checks():
    text = open(os.path.join(SRC, "packaging/sagafeed.service"), encoding="utf-8").read()
    for section in ("[Unit]", "[Service]", "[Install]"):
        check(section in text, f"sagafeed.service lacks {section}")
    check(re.search(r"^ExecStart=\S*sagafeed run -c \S+", text, re.M) is not None,
          "sagafeed.service does not run `sagafeed run -c FILE`")
    check(re.search(r"^KillSignal=SIGTERM", text, re.M) is not None, "sagafeed.service must stop with SIGTERM")
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")):
            check("=" in line, f"sagafeed.service: not a key=value line: {line}")


def docs_checks():
    missing = [n for n in ("configuration.md", "operations.md", "architecture.md")
               if not check(os.path.isfile(os.path.join(SRC, "docs", n)), f"docs/{n} missing")]
    if missing:
        return
    conf = open(os.path.join(SRC, "docs/configuration.md"), encoding="utf-8").read()
    loader = open(os.path.join(SRC, "config/cfg_load.c"), encoding="utf-8").read()
    # every key the loader accepts is documented
    for arr in re.findall(r"static const char \*const (?:keys|top_keys)\[\] = \{(.*?)\};", loader, re.S):
        for key in re.findall(r'"([a-z_]+)"', arr):
            check(f"`{key}`" in conf, f"docs/configuration.md does not document `{key}`")
    ops = open(os.path.join(SRC, "docs/operations.md"), encoding="utf-8").read().lower()
    for topic in ("failover", "replay", "parked", "reset", "pause"):
        check(topic in ops, f"docs/operations.md says nothing about {topic}")


def main():
    svc = compose_checks()
    if svc is not None:
        config_checks(svc)
    unit_checks()
    docs_checks()
    r = subprocess.run([sys.executable, "-m", "py_compile", os.path.join(SRC, "packaging/docker/init_cosmos.py")],
                       capture_output=True, text=True)
    check(r.returncode == 0, f"init_cosmos.py does not compile: {r.stderr}")
    # the subset parser itself must refuse what it does not understand
    for bad in ("a:\n\tb: 1\n", "a: 1\na: 2\n", "a: *nope\n"):
        try:
            parse_yaml(bad)
            check(False, f"the subset parser accepted {bad!r}")
        except YamlError:
            pass
    check(parse_yaml("x: &a\n  k: 1\ny:\n  <<: *a\n  z: [\"p q\", 'r']\n") ==
          {"x": {"k": 1}, "y": {"k": 1, "z": ["p q", "r"]}}, "the subset parser misreads anchors/flow lists")
    print(f"{len(failures)} failure(s)" if failures else "packaging: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
