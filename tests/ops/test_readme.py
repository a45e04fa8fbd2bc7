#!/usr/bin/env python3
"""test_readme_first_page (issue 25 item 12): the first page a user reads shows
`init` -> `check-config` -> `run` against cosmolite and against Azure, with
cosmolite's well-known key; and the cosmolite block works as written, run
line by line (on a free port instead of 8081, with config/examples/
seat-booking.cfg as shop.cfg), up to `run` reporting its workflows running."""
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ["SF_SOURCE_DIR"]
SAGAFEED = os.environ["SF_SAGAFEED_BIN"]
COSMOLITE = os.environ["SF_COSMOLITE_BIN"]
KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
failures = []


def check(ok, msg):
    if not ok:
        failures.append(msg)
        print("FAIL:", msg)
    return ok


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    text = open(os.path.join(SRC, "README.md"), encoding="utf-8").read()
    sec = re.search(r"^## Your own sagas.*?(?=^## )", text, re.S | re.M)
    if not check(sec is not None, "README has no 'Your own sagas' section"):
        return 1
    # it comes before the demo and everything else a reader meets later
    check(text.index(sec.group(0)) < text.index("## The demo"), "the init/check-config/run section is not first")
    blocks = re.findall(r"```sh\n(.*?)```", sec.group(0), re.S)
    if not check(len(blocks) >= 2, "the section needs a cosmolite and an Azure block"):
        return 1
    local, azure = blocks[0], blocks[1]
    for name, b in (("cosmolite", local), ("Azure", azure)):
        pos = [b.find("sagafeed init"), b.find("sagafeed check-config"), b.find("sagafeed run")]
        check(all(p >= 0 for p in pos) and pos == sorted(pos), f"the {name} block is not init -> check-config -> run")
    check(KEY in local, "the cosmolite block does not give cosmolite's well-known key")
    check("documents.azure.com" in azure, "the Azure block names no Azure endpoint")
    # cosmolite's own default key is that one
    h = subprocess.run([COSMOLITE, "--help"], capture_output=True, text=True).stdout
    check("well-known emulator key" in h, "cosmolite --help no longer says its default key is the emulator's")

    # Run the cosmolite block as written, line by line.
    tmp = tempfile.mkdtemp(prefix="sf-readme-")
    bindir = os.path.join(tmp, "bin")
    os.mkdir(bindir)
    os.symlink(SAGAFEED, os.path.join(bindir, "sagafeed"))
    os.symlink(COSMOLITE, os.path.join(bindir, "cosmolite"))
    src = open(os.path.join(SRC, "config/examples/seat-booking.cfg"), encoding="utf-8").read()
    open(os.path.join(tmp, "shop.cfg"), "w", encoding="utf-8").write(src)
    port = free_port()
    env = dict(os.environ, PATH=bindir + ":" + os.environ["PATH"])
    for k in list(env):
        if k.startswith("SAGAFEED_"):
            del env[k]
    procs = []
    ok = True
    try:
        for line in local.splitlines():
            line = line.split("  #")[0].strip().replace("8081", str(port))
            if not line:
                continue
            if line.startswith("export "):
                for a in shlex.split(line[len("export "):]):
                    k, v = a.split("=", 1)
                    env[k] = v
                continue
            if line.endswith("&"):
                procs.append(subprocess.Popen(shlex.split(line[:-1]), cwd=tmp, env=env,
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                deadline = time.time() + 20
                while time.time() < deadline:
                    try:
                        socket.create_connection(("127.0.0.1", port), 0.2).close()
                        break
                    except OSError:
                        time.sleep(0.1)
                continue
            args = shlex.split(line)
            if args[:2] == ["sagafeed", "run"]:
                log = os.path.join(tmp, "run.log")
                p = subprocess.Popen(args, cwd=tmp, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
                deadline = time.time() + 60
                while time.time() < deadline and "running 1 workflow" not in open(log).read():
                    if p.poll() is not None:
                        break
                    time.sleep(0.2)
                ok = check("running 1 workflow" in open(log).read(), f"`{line}` did not start: {open(log).read()[-2000:]}")
                p.send_signal(signal.SIGTERM)
                check(p.wait(30) == 0, "run did not stop cleanly on SIGTERM")
                continue
            r = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
            ok = check(r.returncode == 0, f"`{line}` exited {r.returncode}: {r.stdout}{r.stderr}") and ok
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    if not failures:
        subprocess.run(["rm", "-rf", tmp])
    print(f"{len(failures)} failure(s)" if failures else "README: the first page works as written")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
