"""Shared by the Python test scripts: where the source tree is, a list of
failed checks that lets a script report every failure, not just the first,
a free loopback port, and one signed Cosmos DB REST request."""
import base64
import email.utils
import hashlib
import hmac
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request

SRC = os.environ.get("SF_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
failures = []


def check(cond, what):
    """Records what as a failure unless cond holds; returns cond."""
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)
    return cond


# cosmolite's default key: the well-known emulator key, not a secret
EMU_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


def free_port():
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cosmos_request(endpoint, verb, rtype, link, path, body=None, pk=None, key=EMU_KEY):
    """One request signed with master key (PROTOCOL.md section 1); its HTTP status.
    endpoint is "http://host:port", path starts with "/", pk is a partition key value."""
    date = email.utils.formatdate(usegmt=True)
    text = f"{verb.lower()}\n{rtype.lower()}\n{link}\n{date.lower()}\n\n"
    sig = base64.b64encode(hmac.new(base64.b64decode(key), text.encode(), hashlib.sha256).digest())
    auth = urllib.parse.quote(f"type=master&ver=1.0&sig={sig.decode()}", safe="")
    req = urllib.request.Request(endpoint + path, method=verb,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("authorization", auth)
    req.add_header("x-ms-date", date)
    req.add_header("x-ms-version", "2020-07-15")
    req.add_header("content-type", "application/json")
    if pk is not None:
        req.add_header("x-ms-documentdb-partitionkey", json.dumps([pk]))
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
