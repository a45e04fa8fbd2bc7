"""The console's JSON API (/api/v1/) against cosmolite, without a browser:

  paging        limit + continuation walk every saga once; the filters match the data
  bad_input     unknown status, limit out of range, bad times, unknown workflow or
                saga, a malformed path, a body too large or not JSON: 4xx, clear error
  host          a Host that is not an IP, localhost or console.allowed_hosts: 421
  auth          read-only without console.admin_token_env (403, nothing written);
                with it: no token 401, a wrong one 403, a foreign Origin 403, the
                login cookie HttpOnly + SameSite=Strict and needing an Origin;
                only GET and POST
  no_key        the account key appears in no page and no answer
  console_mode  `sagafeed console` serves the same data without processing, a
                page costs a bounded number of Cosmos requests and nobody looking
                costs none; a token variable that is named but unset stops it
  retries       cosmolite throttles the charge step's batches (429 three times):
                the saga's steps show 3 Cosmos retries for charge and 0 for
                reserve and ship, in the API, `saga show` and `saga show --json`;
                a saga left compensating whose marker read is throttled twice
                shows 2 undo retries for the failed step;
                then an order whose ship step is throttled past the client's budget
                parks, its parking record counting the retries of both attempts
"""
import base64
import email.utils
import hashlib
import hmac
import json
import os
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import console_harness as h  # noqa: E402
from console_harness import http  # noqa: E402

IDS = {"o-1", "o-2", "o-poor", "o-bad", h.HOSTILE_IMG}


def rest(world, method, rtype, link, path, body, headers=None):
    """A master-key signed Cosmos REST call to the world's cosmolite; the parsed answer."""
    date = email.utils.formatdate(usegmt=True)
    payload = "%s\n%s\n%s\n%s\n\n" % (method.lower(), rtype, link, date.lower())
    sig = base64.b64encode(hmac.new(base64.b64decode(h.KEY), payload.encode(),
                                    hashlib.sha256).digest()).decode()
    req = urllib.request.Request(
        world.cosmo.endpoint + path, method=method, data=json.dumps(body).encode(),
        headers=dict({"x-ms-date": date, "x-ms-version": "2018-12-31",
                      "authorization": urllib.parse.quote("type=master&ver=1.0&sig=" + sig,
                                                          safe=""),
                      "content-type": "application/json"}, **(headers or {})))
    with urllib.request.urlopen(req, timeout=15) as r:
        return json.loads(r.read())


class Api(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.world = h.World()
        cls.run_url = cls.world.start("run")
        cls.world.settle()
        cls.url = cls.world.start("console")

    @classmethod
    def tearDownClass(cls):
        cls.world.stop()

    def get(self, path, url=None):
        return http("GET", (url or self.url) + path)

    def test_paging_and_filters(self):
        seen, cont, pages = [], None, 0
        while True:
            q = "/api/v1/sagas?limit=2" + ("&continuation=" + urllib.parse.quote(cont) if cont else "")
            st, r = self.get(q)
            self.assertEqual(st, 200, r)
            self.assertLessEqual(len(r["items"]), 2)
            self.assertLessEqual(r["cosmosRequests"], 20)
            seen += [i["id"] for i in r["items"]]
            pages += 1
            cont = r["continuation"]
            if not cont:
                break
            self.assertLess(pages, 10)
        self.assertEqual(sorted(seen), sorted(IDS))
        st, r = self.get("/api/v1/sagas?status=cancelled")
        self.assertEqual([(i["id"], i["reason"]) for i in r["items"]],
                         [("o-poor", "insufficient balance for 50")])
        st, r = self.get("/api/v1/sagas?status=parked")
        self.assertEqual(sorted(i["id"] for i in r["items"]), sorted(["o-bad", h.HOSTILE_IMG]))
        st, r = self.get("/api/v1/sagas?key=" + urllib.parse.quote(h.HOSTILE_SCRIPT))
        self.assertEqual([i["id"] for i in r["items"]], [h.HOSTILE_IMG])
        st, r = self.get("/api/v1/sagas?q=o-p")
        self.assertEqual([i["id"] for i in r["items"]], ["o-poor"])
        st, r = self.get("/api/v1/sagas?since=2000-01-01T00:00:00Z&until=%d" % (time.time() + 3600))
        self.assertEqual(len(r["items"]), 5)
        st, r = self.get("/api/v1/sagas?until=2000-01-01T00:00:00Z")
        self.assertEqual(r["items"], [])
        st, r = self.get("/api/v1/counts")
        self.assertEqual(r["counts"]["completed"], 2)
        self.assertEqual(r["counts"]["cancelled"], 1)
        self.assertEqual(r["counts"]["parked"], 2)
        st, r = self.get("/api/v1/sagas/order-fulfilment/" + urllib.parse.quote(h.HOSTILE_IMG, safe=""))
        self.assertEqual(st, 200, r)
        self.assertEqual(r["sagaId"], h.HOSTILE_IMG)
        self.assertEqual(r["workflows"][0]["status"], "parked")
        self.assertEqual(r["workflows"][0]["document"]["customerId"], h.HOSTILE_SCRIPT)

    def test_bad_input(self):
        for path, status in (("/api/v1/sagas?status=bogus", 400), ("/api/v1/sagas?limit=0", 400),
                             ("/api/v1/sagas?limit=51", 400), ("/api/v1/sagas?since=yesterday", 400),
                             ("/api/v1/sagas?workflow=nope", 404), ("/api/v1/counts?workflow=nope", 404),
                             ("/api/v1/sagas/order-fulfilment/no-such", 404),
                             ("/api/v1/sagas/nope/o-1", 404), ("/api/v1/sagas/o-1", 400),
                             ("/api/v1/sagas/order-fulfilment/%zz", 400), ("/api/v1/nothing", 404),
                             ("/ui/nothing.js", 404)):
            st, r = self.get(path)
            self.assertEqual(st, status, (path, r))
            if path.startswith("/api/"):
                self.assertTrue(r["error"], path)
        st, r = self.get("/api/v1/sagas?continuation=" + urllib.parse.quote("not a token"))
        self.assertIn(st, (400, 502), r)
        auth = {"Authorization": "Bearer " + h.TOKEN}
        st, r = http("POST", self.url + "/api/v1/pause", {"reason": "x" * 20000}, auth)
        self.assertEqual(st, 413, r)
        st, r = http("POST", self.url + "/api/v1/pause", {"reason": "x" * 201}, auth)
        self.assertEqual(st, 400, r)
        st, r = http("POST", self.url + "/api/v1/pause", {}, auth)
        self.assertEqual(st, 400, r)  # a pause needs a reason
        st, r = http("POST", self.url + "/api/v1/parked/replay", {}, auth)
        self.assertEqual(st, 400, r)
        st, r = http("POST", self.url + "/api/v1/parked/replay", [1], auth)
        self.assertEqual(st, 400, r)
        st, r = http("PUT", self.url + "/api/v1/pause", {"reason": "x"}, auth)
        self.assertEqual(st, 405, r)
        st, r = http("DELETE", self.url + "/api/v1/sagas")
        self.assertEqual(st, 405, r)
        st, fleet = self.get("/api/v1/fleet")
        self.assertFalse(fleet["paused"])

    def test_auth(self):
        u = self.url + "/api/v1/pause"
        st, r = http("POST", u, {"reason": "r"})
        self.assertEqual(st, 401, r)
        st, r = http("POST", u, {"reason": "r"}, {"Authorization": "Bearer wrong-token-0123456789"})
        self.assertEqual(st, 403, r)
        st, r = http("POST", u, {"reason": "r"}, {"Authorization": "Bearer " + h.TOKEN,
                                                  "Origin": "http://evil.example"})
        self.assertEqual(st, 403, r)
        st, r = http("GET", self.url + "/api/v1/pause")
        self.assertEqual(st, 404, r)  # no change by GET
        self.assertFalse(self.get("/api/v1/fleet")[1]["paused"])
        # the login cookie
        host = self.url[len("http://"):]
        import urllib.request
        req = urllib.request.Request(self.url + "/api/v1/login", method="POST",
                                     data=b'{"token":"%s"}' % h.TOKEN.encode(),
                                     headers={"Content-Type": "application/json",
                                              "Origin": "http://" + host})
        with urllib.request.urlopen(req, timeout=30) as resp:
            cookie = resp.headers["Set-Cookie"]
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        jar = cookie.split(";")[0]
        st, r = http("POST", self.url + "/api/v1/login", {"token": h.TOKEN})
        self.assertEqual(st, 403, r)  # a login needs this server's Origin
        st, r = http("POST", self.url + "/api/v1/login", {"token": "nope"},
                     {"Origin": "http://" + host})
        self.assertEqual(st, 403, r)
        st, r = http("POST", u, {"reason": "r"}, {"Cookie": jar})
        self.assertEqual(st, 403, r)  # the cookie without an Origin
        st, r = http("POST", u, {"reason": "r"}, {"Cookie": jar, "Origin": "http://evil.example"})
        self.assertEqual(st, 403, r)
        st, r = http("POST", u, {"reason": "r"}, {"Cookie": "sf_console=" + "0" * 64,
                                                  "Origin": "http://" + host})
        self.assertEqual(st, 401, r)
        self.assertFalse(self.get("/api/v1/fleet")[1]["paused"])
        st, r = http("POST", u, {"reason": "api test"}, {"Cookie": jar, "Origin": "http://" + host})
        self.assertEqual(st, 200, r)
        self.assertTrue(self.get("/api/v1/fleet")[1]["paused"])
        st, r = http("POST", self.url + "/api/v1/resume", {},
                     {"Authorization": "Bearer " + h.TOKEN})
        self.assertEqual(st, 200, r)
        self.assertFalse(self.get("/api/v1/fleet")[1]["paused"])
        # logged out, the cookie is worth nothing
        http("POST", self.url + "/api/v1/logout", {}, {"Cookie": jar, "Origin": "http://" + host})
        st, r = http("POST", u, {"reason": "r"}, {"Cookie": jar, "Origin": "http://" + host})
        self.assertEqual(st, 401, r)

    def test_foreign_host_refused(self):
        # DNS rebinding: another site's name resolving here names its own Host
        port = self.url.rsplit(":", 1)[1]
        for host, status in (("evil.example:" + port, 421), ("localhost:" + port, 200),
                             ("127.0.0.1:" + port, 200), ("[::1]:" + port, 200),
                             ("console.example", 421)):
            st, r = http("GET", self.url + "/api/v1/info", headers={"Host": host})
            self.assertEqual(st, status, (host, r))
        st, r = http("POST", self.url + "/api/v1/pause", {"reason": "r"},
                     {"Host": "evil.example:" + port, "Authorization": "Bearer " + h.TOKEN,
                      "Origin": "http://evil.example:" + port})
        self.assertEqual(st, 421, r)
        self.assertFalse(self.get("/api/v1/fleet")[1]["paused"])

    def test_read_only_without_token(self):
        w = h.World(token=False, orders=[h.order("o-1", "c-1", h.GOOD, 5)])
        try:
            url = w.start("console")
            st, info = http("GET", url + "/api/v1/info")
            self.assertFalse(info["writable"])
            for path, body in (("pause", {"reason": "r"}), ("resume", {}),
                               ("parked/replay", {"all": True}), ("login", {"token": h.TOKEN})):
                st, r = http("POST", url + "/api/v1/" + path, body,
                             {"Authorization": "Bearer " + h.TOKEN})
                self.assertEqual(st, 403, (path, r))
            self.assertEqual(w.query("leases", "SELECT * FROM c"), [])  # no control document
        finally:
            w.stop()

    def test_no_account_key_anywhere(self):
        bodies = []
        for path in ("/ui/", "/ui/app.js", "/ui/app.css", "/api/v1/info", "/api/v1/sagas",
                     "/api/v1/counts", "/api/v1/parked", "/api/v1/fleet", "/api/v1/charts",
                     "/api/v1/sagas/order-fulfilment/o-1"):
            for base in (self.url, self.run_url):
                st, r = self.get(path, base)
                self.assertEqual(st, 200, (base, path, r))
                bodies.append(str(r))
        for b in bodies:
            self.assertNotIn(h.KEY, b)
            self.assertNotIn(h.KEY[:20], b)

    def test_console_mode_costs(self):
        st, info = self.get("/api/v1/info")
        self.assertEqual(info["mode"], "console")
        before = info["cosmosRequestsTotal"]
        time.sleep(3)  # nobody looking: no request at all
        self.assertEqual(self.get("/api/v1/info")[1]["cosmosRequestsTotal"], before)
        st, r = self.get("/api/v1/sagas")
        self.assertLessEqual(r["cosmosRequests"], 2)  # container read (once) + one query page
        st, r = self.get("/api/v1/sagas")
        self.assertEqual(r["cosmosRequests"], 1)
        st, r = self.get("/api/v1/sagas/order-fulfilment/o-1")
        self.assertLessEqual(r["cosmosRequests"], 8)  # events, 4 marker containers, item, parked
        st, r = self.get("/api/v1/counts")
        st, again = self.get("/api/v1/counts")
        self.assertEqual(again["cosmosRequests"], 0)  # kept 30 s
        self.assertEqual(again["counts"], r["counts"])

    def test_hierarchical_key(self):
        # a workflow over a container with a hierarchical partition key: the list shows
        # each saga's whole key, the key filter says why it does not apply
        hier = """  {
    name = "trips"; container = "trips"; state_field = "state"; failed_state = "failed";
    steps = ( { name = "book"; from = "new"; to = "booked";
                do = { kind = "create"; container = "bookings"; partition_key = "{{item.id}}";
                       document = { id = "b-{{item.id}}"; }; }; } );
  }"""
        w = h.World(orders=[], extra_workflow=hier)
        try:
            # Debian's v3 SDK knows no hierarchical keys: plain signed REST calls
            rest(w, "POST", "colls", "dbs/shop", "dbs/shop/colls", {
                "id": "trips", "partitionKey": {"paths": ["/tenant", "/trip"],
                                                "kind": "MultiHash", "version": 2}})
            for doc in ({"id": "t-1", "tenant": "acme", "trip": "x", "state": "booked"},
                        {"id": "t-2", "tenant": "acme", "trip": "y", "state": "new"}):
                rest(w, "POST", "docs", "dbs/shop/colls/trips", "dbs/shop/colls/trips/docs", doc,
                     {"x-ms-documentdb-partitionkey": json.dumps([doc["tenant"], doc["trip"]])})
            url = w.start("console")
            st, r = http("GET", url + "/api/v1/sagas?workflow=trips")
            self.assertEqual(st, 200, r)
            got = sorted((i["id"], i["status"], tuple(i["key"])) for i in r["items"])
            self.assertEqual(got, [("t-1", "completed", ("acme", "x")),
                                   ("t-2", "running", ("acme", "y"))])
            st, r = http("GET", url + "/api/v1/sagas?workflow=trips&key=acme")
            self.assertEqual(st, 400, r)
            self.assertIn("hierarchical", r["error"])
            st, r = http("GET", url + "/api/v1/sagas/trips/t-1")
            self.assertEqual(st, 200, r)
            self.assertEqual(r["workflows"][0]["status"], "completed")
        finally:
            w.stop()

    def test_step_cosmos_retries(self):
        # o-undo was left compensating after charge failed: its compensation reads
        # charge's marker (in customers) to learn whether charge did anything
        undo = dict(h.order("o-undo", "c-3", h.GOOD, 5, status="cancelling"),
                    sfFailedStep="charge", reason="declined")
        w = h.World(orders=[h.order("o-slow", "c-1", h.GOOD, 5), undo])
        try:
            # 429s count toward max_attempts at once: o-stuck below parks after two
            with open(w.cfg) as f:
                text = f.read()
            with open(w.cfg, "w") as f:
                f.write(text.replace("max_attempts = 2;", 'max_attempts = 2; max_throttled_wait = "0s";'))
            # the charge step is the only one that writes to customers (one batch per try)
            w.cosmo.admin("PUT", "faults", {"seed": 1, "rules": [
                {"status": 429, "op": "batch", "container": "customers", "count": 3,
                 "retryAfterMs": 10},
                {"status": 429, "op": "read", "container": "customers", "count": 2,
                 "retryAfterMs": 10}]})
            w.start("run")
            self.assertTrue(w.wait_state("o-slow", "c-1", "completed"), "o-slow did not complete")
            self.assertTrue(w.wait_state("o-undo", "c-3", "cancelled"), "o-undo was not cancelled")
            fired = w.cosmo.admin("GET", "faults")
            self.assertEqual([r.get("fired") for r in fired["rules"]], [3, 2], fired)
            st, r = http("GET", w.start("console") + "/api/v1/sagas/order-fulfilment/o-slow?key=c-1")
            self.assertEqual(st, 200, r)
            steps = {s["step"]: s for s in r["workflows"][0]["steps"]}
            self.assertEqual({k: (s["cosmosRetries"], s["undoCosmosRetries"])
                              for k, s in steps.items()},
                             {"reserve": (0, None), "charge": (3, None), "ship": (0, None)}, steps)
            self.assertEqual(r["workflows"][0]["document"]["sfRetries"]["charge"], {"do": 3})
            show = [os.environ["SF_SAGAFEED_BIN"], "saga", "show", "o-slow", "-c", w.cfg]
            p = subprocess.run(show + ["--json"], env=w.env, capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            steps = {s["step"]: s["cosmosRetries"] for s in json.loads(p.stdout)["workflows"][0]["steps"]}
            self.assertEqual(steps, {"reserve": 0, "charge": 3, "ship": 0})
            p = subprocess.run(show, env=w.env, capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("reserved -> charged: done (Cosmos retries 3)", p.stdout)
            self.assertIn("placed -> reserved: done (Cosmos retries 0)", p.stdout)
            st, r = http("GET", w.start("console") + "/api/v1/sagas/order-fulfilment/o-undo?key=c-3")
            self.assertEqual(st, 200, r)
            steps = {s["step"]: (s["cosmosRetries"], s["undoCosmosRetries"])
                     for s in r["workflows"][0]["steps"]}
            # charge's undo read its marker through two 429s; reserve's needed no read and
            # ran no forward pass here, so nothing is recorded for it
            self.assertEqual(steps, {"reserve": (None, None), "charge": (None, 2),
                                     "ship": (None, None)})
            # o-stuck's ship step is throttled past the client's budget on both of its
            # attempts: it parks, and its parking record counts the retries of both
            w.cosmo.admin("PUT", "faults", {"seed": 1, "rules": [
                {"status": 429, "op": "batch", "container": "shipments", "count": 1000,
                 "retryAfterMs": 1}]})
            w.upsert("orders", h.order("o-stuck", "c-1", h.GOOD, 5))
            self.assertTrue(w.wait_parked(1), w.parked_records())
            fired = w.cosmo.admin("GET", "faults")["rules"][0]["fired"]
            st, r = http("GET", w.start("console") + "/api/v1/sagas/order-fulfilment/o-stuck?key=c-1")
            self.assertEqual(st, 200, r)
            v = r["workflows"][0]
            steps = {s["step"]: s["cosmosRetries"] for s in v["steps"]}
            self.assertEqual(steps, {"reserve": 0, "charge": 0, "ship": None})
            self.assertEqual([(p["attempts"], p["cosmosRetries"]) for p in v["parked"]],
                             [(2, fired - 2)], v["parked"])  # each attempt's last 429 gave up
            self.assertGreater(fired - 2, 0)
        finally:
            w.stop()

    def test_console_needs_its_token_variable(self):
        env = dict(self.world.env)
        del env["SF_TEST_TOKEN"]
        p = subprocess.run([os.environ["SF_SAGAFEED_BIN"], "console", "-c", self.world.cfg,
                            "--http", "127.0.0.1:0"], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("SF_TEST_TOKEN", p.stderr)
        self.assertIn("unset", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
