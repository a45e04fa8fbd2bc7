#!/usr/bin/env python3
"""Checks the packaging without Docker: docker-compose.yml, the Dockerfile
and what they reference, the container configuration (with sagafeed's own
check-config, under the environment compose gives it), the command lines,
ports, hosts, database and containers both files name (against the binary's
--help and each other), the sagafeed service's own command run under
compose's environment against cosmolite and librdkafka's mock cluster, the
systemd unit and the docs.

docker-compose.yml is parsed twice: by a small line-based parser of the
YAML subset compose files use (block maps and lists, flow lists, quoted
scalars, anchors and << merges), and by PyYAML when it is installed; both
must agree, so the check works on machines without PyYAML.

Environment: SF_SOURCE_DIR (the source tree), SF_SAGAFEED_BIN (the binary),
SF_COSMOLITE_BIN and SF_KAFKA_MOCK_BIN (for the run; skipped without them).
Exit status 0 when every check passed, 1 otherwise (each failure printed).
"""
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checks import SRC, check, failures, free_port  # noqa: E402

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
    # Issue 25 item 11: KRaft's cluster id is 16 bytes in base64url (22
    # characters): anything else and the broker never formats, and sagafeed,
    # waiting for it, never starts.
    cid = str(kenv.get("CLUSTER_ID", ""))
    try:
        raw = base64.urlsafe_b64decode(cid + "=" * (-len(cid) % 4))
    except (ValueError, TypeError):
        raw = b""
    check(len(cid) == 22 and re.fullmatch(r"[A-Za-z0-9_-]{22}", cid) and len(raw) == 16,
          f"kafka CLUSTER_ID {cid!r} is not 16 bytes in base64url (22 characters)")
    # published ports listen on loopback only (the emulator's key is public)
    for name, svc in services.items():
        for p in svc.get("ports") or []:
            check(str(p).startswith("127.0.0.1:"), f"{name} publishes {p} on every address, not 127.0.0.1")
    # the emulator has a physical partition for every container `sagafeed init` creates
    parts = int(str(env_of(services["cosmosdb"]).get("AZURE_COSMOS_EMULATOR_PARTITION_COUNT", "0")))
    want = len(init_containers()) + 2  # and the lease and parking containers
    check(parts >= want, f"AZURE_COSMOS_EMULATOR_PARTITION_COUNT {parts} < {want} containers")
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
    # the build stage copies the programs from where this build tree has them
    m = re.search(r"cmake -S \. -B (\S+)", text)
    for name, env in (("sagafeed", "SF_SAGAFEED_BIN"), ("cosmolite", "SF_COSMOLITE_BIN")):
        tree = re.escape(m.group(1)) if m else "/build"
        built = re.search(r"\bcp\b[^\n]*?" + tree + r"/(\S+/" + name + r")\b", text)
        if check(built is not None, f"the Dockerfile copies no {name} out of its build tree") and os.environ.get(env):
            check(os.environ[env].endswith("/" + built.group(1)),
                  f"the Dockerfile copies {built.group(1)}, but the build puts {name} at {os.environ[env]}")


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


def sagafeed_help(*args):
    r = subprocess.run([SAGAFEED, *args, "--help"], capture_output=True, text=True, timeout=30)
    return r.stdout + r.stderr


def image_config_path(dockerfile):
    """Where the Dockerfile puts packaging/docker/sagafeed.cfg in the image."""
    m = re.search(r"cp packaging/docker/sagafeed\.cfg /out/etc/(\S+)", dockerfile)
    d = re.search(r"^COPY --from=\S+ /out/etc/ (\S+)$", dockerfile, re.M)
    if not check(m and d, "the Dockerfile no longer copies packaging/docker/sagafeed.cfg to /out/etc/"):
        return None
    return d.group(1).rstrip("/") + "/" + m.group(1)


def host_port(addr, what):
    m = re.fullmatch(r"(?:[a-z]+://)?([\w.-]*):(\d+)/?", addr or "")
    check(m is not None, f"{what} '{addr}' is not HOST:PORT")
    return (m.group(1), int(m.group(2))) if m else (None, None)


def duration_s(text):
    m = re.fullmatch(r"(\d+)(ms|s|m)", str(text))
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)] if m else None


def command_checks(services):
    """What compose and the Dockerfile name against the binary and each other.

    The sagafeed command lines (the service's command, the Dockerfile's CMD and
    the `sagafeed ...` lines of both files' comments) use commands and options
    the binary's --help lists and the config path the image has; the ports,
    hosts, database and containers the services pass each other agree."""
    svc = services["sagafeed"]
    env = env_of(svc)
    compose = open(os.path.join(SRC, "docker-compose.yml"), encoding="utf-8").read()
    dockerfile = open(os.path.join(SRC, "Dockerfile"), encoding="utf-8").read()
    cfg_text = open(os.path.join(SRC, "packaging/docker/sagafeed.cfg"), encoding="utf-8").read()
    top = sagafeed_help()
    commands = set(re.findall(r"^  ([a-z][\w-]*)", top, re.M))
    check("run" in commands and "status" in commands, f"sagafeed --help lists no commands:\n{top}")
    image_cfg = image_config_path(dockerfile)
    cmd = svc.get("command")
    lines = []
    if check(isinstance(cmd, list) and cmd, "the sagafeed service has no command list"):
        lines.append(("the sagafeed service's command", [str(x) for x in cmd]))
    init = services.get("cosmos-init") or {}
    iargv = init_argv(init)
    if check(iargv is not None, "the cosmos-init service does not run `sagafeed init -c FILE`"):
        lines.append(("the cosmos-init service's command", iargv))
        check("-c" in iargv or "--config" in iargv, "cosmos-init's `sagafeed init` names no -c FILE")
    check(init.get("build") == svc.get("build") or (init.get("image") and init.get("image") == svc.get("image")),
          "cosmos-init does not run the sagafeed service's image")
    check("init_cosmos" not in compose, "docker-compose.yml still refers to an init script")
    m = re.search(r"^CMD (\[.*\])$", dockerfile, re.M)
    if check(m is not None, "the Dockerfile has no CMD list"):
        lines.append(("the Dockerfile's CMD", [x.strip().strip('"') for x in m.group(1)[1:-1].split(",")]))
    for text, where in ((compose, "docker-compose.yml"), (dockerfile, "Dockerfile")):
        for m in re.finditer(r"#.*?\bsagafeed sagafeed ([a-z][\w-]*(?: -\S+(?: [^\s#-]\S*)?)*)", text):
            lines.append((f"{where}: `{m.group(0).lstrip('# ')}`", m.group(1).split()))
    for what, argv in lines:
        sub = argv[0]
        if not check(sub in commands, f"{what}: sagafeed has no command '{sub}'"):
            continue
        usage = sagafeed_help(sub)
        for i, a in enumerate(argv[1:], 1):
            if a.startswith("-"):
                check(re.search(r"(^|[\s\[,])" + re.escape(a) + r"\b", usage) is not None,
                      f"{what}: `sagafeed {sub} --help` knows no option {a}")
            if a in ("-c", "--config") and i + 1 < len(argv) and image_cfg:
                check(argv[i + 1] == image_cfg, f"{what}: -c {argv[i + 1]}, but the image's config is {image_cfg}")
    # metrics port: the variable, the file, the published port, EXPOSE and HEALTHCHECK agree
    _, port = host_port(env.get("SAGAFEED_PROCESSOR_HTTP_LISTEN"), "SAGAFEED_PROCESSOR_HTTP_LISTEN")
    m = re.search(r'http_listen\s*=\s*"([^"]*)"', cfg_text)
    if check(m is not None, "packaging/docker/sagafeed.cfg sets no processor.http_listen"):
        check(host_port(m.group(1), "processor.http_listen")[1] == port,
              "processor.http_listen of the image's config and SAGAFEED_PROCESSOR_HTTP_LISTEN differ")
    published = [str(p) for p in svc.get("ports") or []]
    check(any(p.split(":")[-1] == str(port) for p in published),
          f"the sagafeed service does not publish its metrics port {port}: {published}")
    check(re.search(r"^EXPOSE\s+%d\b" % (port or 0), dockerfile, re.M) is not None,
          f"the Dockerfile does not EXPOSE {port}")
    check(f"127.0.0.1:{port}/healthz" in dockerfile, f"the Dockerfile's HEALTHCHECK does not ask :{port}/healthz")
    # the services it talks to are the ones compose starts, on the ports they serve
    ienv = env_of(init)
    host, cport = host_port(env.get("SAGAFEED_COSMOS_ENDPOINT"), "SAGAFEED_COSMOS_ENDPOINT")
    check(host in services, f"SAGAFEED_COSMOS_ENDPOINT names {host}, not a service")
    for var in ("SAGAFEED_COSMOS_ENDPOINT", "SAGAFEED_COSMOS_KEY_ENV", "SAGAFEED_COSMOS_TLS_VERIFY"):
        check(ienv.get(var) == env.get(var), f"cosmos-init and sagafeed are given different {var}")
    key_var = env.get("SAGAFEED_COSMOS_KEY_ENV", "")
    check(key_var in ienv and ienv.get(key_var) == env.get(key_var),
          f"cosmos-init and sagafeed are given different keys ({key_var})")
    check(f":{cport}/" in str((services.get(host) or {}).get("healthcheck", {}).get("test")),
          f"the {host} service's healthcheck does not ask port {cport}")
    khost, kport = host_port(env.get("SAGAFEED_KAFKA_BROKERS"), "SAGAFEED_KAFKA_BROKERS")
    check(khost in services, f"SAGAFEED_KAFKA_BROKERS names {khost}, not a service")
    check(f"{khost}:{kport}" in env_of(services.get(khost) or {}).get("KAFKA_ADVERTISED_LISTENERS", ""),
          f"kafka does not advertise {khost}:{kport}")
    # the same configuration, so the same database and containers (the -c path checked above)
    check(iargv is not None and image_cfg in iargv,
          f"cosmos-init's `sagafeed init` does not read the image's config {image_cfg}")
    # the containers the init job creates are the workflows' (and the demo's layout)
    conts = init_containers()
    demo = open(os.path.join(SRC, "demo/demo.c"), encoding="utf-8").read()
    m = re.search(r"colls\[\] = \{(.*?)\};", demo, re.S)
    check(m is not None and conts == re.findall(r'\{"(\w+)", "(/[\w/]+)"\}', m.group(1)),
          "the image config's containers are no longer sagafeed demo's (demo/demo.c)")
    example = open(os.path.join(SRC, "config/examples/order-fulfilment.cfg"), encoding="utf-8").read()
    wf = example[example.find("\nworkflows = ("):]
    names = {c for c, _ in conts}
    for c in sorted(set(re.findall(r'^\s*container\s*=\s*"([^"]+)"', wf, re.M))):
        check(c in names, f"the workflows use container {c}, which cosmos-init does not create")
    # a stop drains within the grace period (--drain-timeout's default)
    m = re.search(r"^\s+--drain-timeout D .*?\(default (\w+)\)", sagafeed_help("run"), re.S | re.M)
    grace = duration_s(svc.get("stop_grace_period", "10s"))
    drain = duration_s(m.group(1)) if m else None
    if check(drain is not None, "`sagafeed run --help` states no --drain-timeout default"):
        check(grace is not None and grace >= drain,
              f"stop_grace_period {svc.get('stop_grace_period')} is shorter than the drain ({m.group(1)})")


def interpolate(v):
    """Compose's ${VAR:-default} and ${VAR} from this process's environment."""
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), v)


def http_status(url):
    import urllib.error  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return None, ""


def live_checks(services):
    """The sagafeed service's own command line, run under compose's environment.

    Only the addresses are replaced: cosmolite (plain HTTP; the emulator's
    TLS is turned off by the same variable) in place of the emulator, with
    the database and containers the cosmos-init service's own `sagafeed init`
    creates (run twice: the second run changes nothing), librdkafka's mock
    cluster in place of Kafka, a free port in place of 9464. It must come up
    healthy, answer /metrics and `sagafeed status` (the file's comment), and
    stop cleanly on SIGTERM within stop_grace_period."""
    cosmolite, mock = os.environ.get("SF_COSMOLITE_BIN"), os.environ.get("SF_KAFKA_MOCK_BIN")
    if not (cosmolite and os.access(cosmolite, os.X_OK) and mock and os.access(mock, os.X_OK)):
        print("note: SF_COSMOLITE_BIN or SF_KAFKA_MOCK_BIN unset: the compose command was not run")
        return
    import time  # noqa: PLC0415

    svc = services["sagafeed"]
    env = {k: interpolate(v) for k, v in env_of(svc).items()}
    ienv = {k: interpolate(v) for k, v in env_of(services["cosmos-init"]).items()}
    iargv = init_argv(services["cosmos-init"])
    if not check(iargv is not None, "no `sagafeed init` to run for cosmos-init"):
        return
    tmp = tempfile.mkdtemp(prefix="sf-compose-run-")
    procs = []
    try:
        cfg = os.path.join(tmp, "sagafeed.cfg")
        shutil.copy(os.path.join(SRC, "packaging/docker/sagafeed.cfg"), cfg)
        example = open(os.path.join(SRC, "config/examples/order-fulfilment.cfg"), encoding="utf-8").read()
        with open(os.path.join(tmp, "order-workflows.cfg"), "w", encoding="utf-8") as f:
            f.write(example[example.find("\nworkflows = (") + 1:])
        pf, kf = os.path.join(tmp, "cosmolite.port"), os.path.join(tmp, "kafka.port")
        # the key compose gives sagafeed (through the variable SAGAFEED_COSMOS_KEY_ENV names)
        key = env.get(env.get("SAGAFEED_COSMOS_KEY_ENV", ""), "")
        procs.append(subprocess.Popen([cosmolite, "--memory", "--listen", "127.0.0.1:0", "--port-file", pf,
                                       "--key", key], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        kafka = subprocess.Popen([mock, "--port-file", kf], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
        procs.append(kafka)
        deadline = time.monotonic() + 60
        while not (os.path.exists(pf) and os.path.getsize(pf) and os.path.exists(kf) and os.path.getsize(kf)):
            if not check(time.monotonic() < deadline, "cosmolite or the Kafka mock did not start"):
                return
            time.sleep(0.1)
        port = int(open(pf).read())
        brokers = kafka.stdout.readline().strip()
        base = {k: v for k, v in os.environ.items() if not k.startswith("SAGAFEED_")}
        init_env = {**base, **ienv, "SAGAFEED_COSMOS_ENDPOINT": f"http://127.0.0.1:{port}/"}
        argv = list(iargv)
        argv[argv.index("-c") + 1] = cfg
        r = subprocess.run([SAGAFEED, *argv], env=init_env, capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"cosmos-init's `sagafeed {' '.join(iargv)}` failed:\n{r.stdout}{r.stderr}")
        for name, _ in init_containers():
            check(re.search(r"\b%s\b.*created" % re.escape(name), r.stdout) is not None,
                  f"`sagafeed init` did not say it created {name}:\n{r.stdout}")
        r = subprocess.run([SAGAFEED, *argv], env=init_env, capture_output=True, text=True, timeout=120)
        check(r.returncode == 0 and "created" not in r.stdout,
              f"a second `sagafeed init` (compose restarted) was not a no-op:\n{r.stdout}{r.stderr}")
        http = free_port()
        listen = re.sub(r"\d+$", str(http), env["SAGAFEED_PROCESSOR_HTTP_LISTEN"])  # ":9464" -> ":<free>"
        run_env = {**base, **env, "SAGAFEED_COSMOS_ENDPOINT": f"http://127.0.0.1:{port}/",
                   "SAGAFEED_KAFKA_BROKERS": brokers, "SAGAFEED_PROCESSOR_HTTP_LISTEN": listen}
        argv = [str(x) for x in svc["command"]]
        argv[argv.index("-c") + 1] = cfg
        sf = subprocess.Popen([SAGAFEED, *argv], env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
        procs.append(sf)
        deadline = time.monotonic() + 120
        while http_status(f"http://127.0.0.1:{http}/healthz")[0] != 200:
            if sf.poll() is not None or time.monotonic() >= deadline:
                sf.kill()
                check(False, f"`sagafeed {' '.join(argv)}` under compose's environment never got "
                             f"healthy:\n{sf.communicate()[1][-2000:]}")
                return
            time.sleep(0.2)
        status, metrics = http_status(f"http://127.0.0.1:{http}/metrics")
        check(status == 200 and "sagafeed_" in metrics, "/metrics does not answer with sagafeed's metrics")
        r = subprocess.run([SAGAFEED, "status", "-c", cfg], env=run_env, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, f"`sagafeed status -c` under compose's environment failed:\n{r.stderr}")
        sf.terminate()
        try:
            rc = sf.wait(timeout=duration_s(svc.get("stop_grace_period", "10s")) or 10)
            err = sf.stderr.read()
            check(rc == 0, f"sagafeed exited {rc} on SIGTERM:\n{err[-2000:]}")
            check('"level":"error"' not in err, f"sagafeed logged errors:\n{err[-2000:]}")
        except subprocess.TimeoutExpired:
            check(False, "sagafeed did not stop within stop_grace_period")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def init_containers():
    """The containers = (...) list of packaging/docker/sagafeed.cfg: what `sagafeed init`
    creates for the workflows (besides the lease and parking containers)."""
    cfg = open(os.path.join(SRC, "packaging/docker/sagafeed.cfg"), encoding="utf-8").read()
    m = re.search(r"^containers\s*=\s*\((.*?)^\);", cfg, re.S | re.M)
    if not check(m is not None, "packaging/docker/sagafeed.cfg declares no containers = (...)"):
        return []
    return re.findall(r'name\s*=\s*"(\w+)";\s*partition_key\s*=\s*"(/[\w/]+)"', m.group(1))


def init_argv(init):
    """The `sagafeed init ...` argv (after "sagafeed") the cosmos-init service runs, or None.

    Issue 25: the init job is the image's own `sagafeed init -c FILE`, not a
    script with an SDK of its own: either the command list itself (the image's
    entrypoint is sagafeed) or a `sagafeed init ...` inside an `sh -c` line."""
    cmd = [str(x) for x in init.get("command") or []]
    entry = [str(x) for x in init.get("entrypoint") or []]
    if not entry and cmd[:1] == ["init"]:
        return cmd
    if entry[:2] == ["sh", "-c"] and len(cmd) == 1:
        m = re.search(r"\bsagafeed (init(?: -\S+(?: [^\s;&|-]\S*)?)*)", cmd[0])
        if m:
            return [a.rstrip(";") for a in m.group(1).split()]
    return None


def package_checks():
    """Issue 25 item 11: a prerm that stops the service, and the service's example
    configuration binding /metrics to loopback."""
    prerm = os.path.join(SRC, "packaging/debian/prerm")
    if check(os.path.isfile(prerm) and os.access(prerm, os.X_OK), "packaging/debian/prerm missing or not executable"):
        text = open(prerm, encoding="utf-8").read()
        check("stop sagafeed.service" in text and "remove" in text and "upgrade" in text,
              "prerm does not stop sagafeed.service on remove and upgrade")
        r = subprocess.run(["sh", "-n", prerm], capture_output=True, text=True)
        check(r.returncode == 0, f"prerm is not valid sh: {r.stderr}")
    cmake = open(os.path.join(SRC, "packaging/CMakeLists.txt"), encoding="utf-8").read()
    check("debian/prerm" in cmake, "the package does not ship debian/prerm (CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA)")
    cfg = open(os.path.join(SRC, "packaging/docker/sagafeed.cfg"), encoding="utf-8").read()
    m = re.search(r'^\s*http_listen\s*=\s*"([^"]*)"', cfg, re.M)
    check(m is not None and m.group(1).startswith("127.0.0.1:"),
          f"the service's example config binds metrics to {m and m.group(1)!r}, not 127.0.0.1")


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
        if SAGAFEED and os.access(SAGAFEED, os.X_OK):
            services = parse_yaml(open(os.path.join(SRC, "docker-compose.yml"), encoding="utf-8").read())["services"]
            command_checks(services)
            live_checks(services)
    unit_checks()
    package_checks()
    docs_checks()
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
