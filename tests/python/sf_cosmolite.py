"""What the Python SDK tests share: the emulator key and a private cosmolite.

Importing it exits 77 (skipped) when Debian's python3-azure-cosmos is missing,
so every test that imports it skips with one message. Not a test itself (the
glob in tests.cmake runs test_*.py only).
"""
import base64
import email.utils
import hashlib
import hmac
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

try:
    import azure.cosmos  # noqa: F401
except ImportError:
    print("SKIP: python3-azure-cosmos is not installed (apt-get install python3-azure-cosmos)")
    sys.exit(77)

KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="


class Cosmolite:
    """A private in-memory cosmolite ($COSMOLITE_BIN) on an ephemeral loopback
    port; `listen=False` leaves the address to args (--regions)."""

    def __init__(self, *args, listen=True):
        self.dir = tempfile.TemporaryDirectory(prefix="cosmolite-py-")
        port_file = os.path.join(self.dir.name, "port")
        where = ["--listen", "127.0.0.1:0"] if listen else []
        self.proc = subprocess.Popen(
            [os.environ["COSMOLITE_BIN"], "--memory", *where, "--port-file", port_file, *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("cosmolite exited: " + self.proc.stderr.read().decode())
            try:
                with open(port_file) as f:
                    text = f.read()
                if text.endswith("\n"):
                    self.port = int(text)
                    break
            except FileNotFoundError:
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("cosmolite did not start within 15 s")
            time.sleep(0.02)
        self.endpoint = "http://127.0.0.1:%d/" % self.port

    def admin(self, method, what, body=None):
        """A signed /_admin request (resource type "_admin", link "_admin/<what>");
        returns the parsed JSON answer, raising on an HTTP error."""
        date = email.utils.formatdate(usegmt=True)
        payload = "%s\n_admin\n_admin/%s\n%s\n\n" % (method.lower(), what, date.lower())
        sig = base64.b64encode(
            hmac.new(base64.b64decode(KEY), payload.encode(), hashlib.sha256).digest()
        ).decode()
        req = urllib.request.Request(
            self.endpoint + "_admin/" + what,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={
                "x-ms-date": date,
                "x-ms-version": "2018-12-31",
                "authorization": urllib.parse.quote("type=master&ver=1.0&sig=" + sig, safe=""),
                "content-type": "application/json",
            },
        )
        with urllib.request.urlopen(req, timeout=15) as r:
            return json.loads(r.read())

    def stop(self):
        """SIGTERM; returns cosmolite's stderr, raising unless it exited cleanly."""
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=15)
        self.dir.cleanup()
        if self.proc.returncode != 0:
            raise RuntimeError("cosmolite exited with %d: %s" % (self.proc.returncode, err.decode()))
        return err.decode()
