#!/usr/bin/env python3
"""Instructions per request of one cosmolite binary, by operation (see bench/README.md).

Starts BIN under valgrind --tool=callgrind (durable mode, --data in a temporary
directory, the server's defaults otherwise), creates a database and a container,
fills it with --fill documents, then runs each phase of --requests requests on one
keep-alive connection. Around each phase callgrind's counters are zeroed and dumped
(callgrind_control -z / -d), so a phase's figure excludes start-up and the other
phases. Prints one line per phase: "<op> <instructions per request>". It asserts
nothing; instruction counts do not depend on the machine's load, wall-clock does.

Usage: cosmolite_instr.py BIN [--requests N] [--fill N] [--keep DIR] [--annotate]
"""
import argparse
import base64
import glob
import hashlib
import hmac
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.parse
from email.utils import formatdate

KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
LINK = "dbs/bench/colls/bench"


class Client:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.key = base64.b64decode(KEY)

    def request(self, verb, rtype, rlink, path, body=None, headers=None):
        date = formatdate(usegmt=True)
        text = "%s\n%s\n%s\n%s\n\n" % (verb.lower(), rtype.lower(), rlink, date.lower())
        sig = base64.b64encode(hmac.new(self.key, text.encode(), hashlib.sha256).digest()).decode()
        h = {
            "x-ms-date": date,
            "x-ms-version": "2018-12-31",
            "authorization": urllib.parse.quote("type=master&ver=1.0&sig=" + sig, safe=""),
        }
        if headers:
            h.update(headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["content-type"] = "application/json"
        self.conn.request(verb, path, body=data, headers=h)
        resp = self.conn.getresponse()
        payload = resp.read()
        return resp.status, resp.getheader("etag"), payload


def doc(i, rev=0):
    return {
        "id": "d%06d" % i,
        "pk": "p%03d" % (i % 1000),
        "orderId": "order-%06d" % i,
        "customer": "customer-%04d" % (i % 5000),
        "items": [{"sku": "sku-%d" % (i % 97), "qty": 1 + i % 5}],
        "total": 10 + i % 90,
        "state": "created",
        "rev": rev,
    }


def pk_header(i):
    return {"x-ms-documentdb-partitionkey": json.dumps(["p%03d" % (i % 1000)])}


def expect(status, want, what):
    if status not in want:
        sys.exit("cosmolite_instr: %s answered %d" % (what, status))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("--requests", type=int, default=300, help="requests per phase (default 300)")
    ap.add_argument("--fill", type=int, default=1000, help="documents before the phases (default 1000)")
    ap.add_argument("--keep", help="keep callgrind's dumps in this directory")
    ap.add_argument("--annotate", action="store_true",
                    help="print callgrind_annotate --inclusive=yes per phase on stderr")
    a = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="cosmolite-instr-")
    out_dir = a.keep or tmp.name
    os.makedirs(out_dir, exist_ok=True)
    port_file = os.path.join(tmp.name, "port")
    out = os.path.join(out_dir, "callgrind.out")
    for f in glob.glob(out + "*"):
        os.unlink(f)
    log = open(os.path.join(out_dir, "cosmolite.log"), "w")
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, a.bin, "--listen", "127.0.0.1:0",
         "--port-file", port_file, "--data", os.path.join(tmp.name, "data")],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 300
        port = 0
        while not port:
            if proc.poll() is not None or time.time() > deadline:
                sys.exit("cosmolite_instr: %s did not start (see %s/cosmolite.log)" % (a.bin, out_dir))
            try:
                with open(port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    port = int(text)
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        c = Client(port)
        expect(c.request("POST", "dbs", "", "/dbs", {"id": "bench"})[0], (201, 409), "create database")
        expect(c.request("POST", "colls", "dbs/bench", "/dbs/bench/colls",
                         {"id": "bench", "partitionKey": {"paths": ["/pk"], "kind": "Hash", "version": 2}})[0],
               (201, 409), "create container")
        for i in range(a.fill):
            expect(c.request("POST", "docs", LINK, "/" + LINK + "/docs", doc(i), pk_header(i))[0], (201,), "fill")

        rnd = random.Random(15)
        n = a.requests
        next_id = a.fill

        def create(_):
            nonlocal next_id
            i = next_id
            next_id += 1
            return c.request("POST", "docs", LINK, "/" + LINK + "/docs", doc(i), pk_header(i))[0], (201,)

        def read(_):
            i = rnd.randrange(a.fill)
            dl = "%s/docs/d%06d" % (LINK, i)
            return c.request("GET", "docs", dl, "/" + dl, None, pk_header(i))[0], (200,)

        def replace(k):
            i = rnd.randrange(a.fill)
            dl = "%s/docs/d%06d" % (LINK, i)
            return c.request("PUT", "docs", dl, "/" + dl, doc(i, k + 1), pk_header(i))[0], (200,)

        def changefeed(_):
            # The first page from the beginning each time: the same 100 items per request.
            h = {"a-im": "Incremental Feed", "x-ms-documentdb-partitionkeyrangeid": "0",
                 "x-ms-max-item-count": "100"}
            return c.request("GET", "docs", LINK, "/" + LINK + "/docs", None, h)[0], (200,)

        def query(k):
            i = rnd.randrange(a.fill)
            h = dict(pk_header(i))
            h["x-ms-documentdb-isquery"] = "true"
            h["content-type"] = "application/query+json"
            body = {"query": "SELECT * FROM c WHERE c.pk = @pk", "parameters": [{"name": "@pk", "value": "p%03d" % (i % 1000)}]}
            return c.request("POST", "docs", LINK, "/" + LINK + "/docs", body, h)[0], (200,)

        phases = [("read", read), ("create", create), ("replace", replace), ("changefeed", changefeed),
                  ("query", query)]
        for name, fn in phases:
            fn(0)  # warm the path outside the counted window
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for k in range(n):
                status, want = fn(k)
                expect(status, want, name)
            subprocess.run(["callgrind_control", "-d", name, str(proc.pid)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c.conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=120)
        log.close()

    dumps = sorted(glob.glob(out + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    for name, _ in phases:
        path = None
        for d in dumps:
            with open(d) as f:
                head = f.read(4096)
            if "\ndesc: Trigger: dump %s\n" % name in head:
                path = d
        if not path:
            sys.exit("cosmolite_instr: no callgrind dump for phase %s" % name)
        total = None
        with open(path) as f:
            for line in f:
                if line.startswith("summary:"):
                    total = int(line.split()[1])
        print("%s %d" % (name, round(total / n)))
        if a.annotate:
            r = subprocess.run(["callgrind_annotate", "--inclusive=yes", path], capture_output=True, text=True)
            sys.stderr.write("== %s (%s)\n%s\n" % (name, path, r.stdout))


if __name__ == "__main__":
    main()
