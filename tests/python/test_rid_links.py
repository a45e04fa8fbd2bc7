"""A second referee for cosmolite's RID-based addressing (issue 15, behaviour 8):
Debian's python3-azure-cosmos (the v3 SDK) driven entirely by _self links, as
v3 applications are written: it signs a RID link over the last _rid,
lowercased (auth.py), and runs its own cross-partition query pipeline over the
pkranges feed of the container's RID link. Also checks that feed's Azure
shape, and that a merge (POST /_admin/merge) is seen by a client that only
reads ranges.

Run: COSMOLITE_BIN=build/emulator/cosmolite /usr/bin/python3 tests/python/test_rid_links.py
Exit status 0 passed, 1 failed, 77 skipped (the package is not installed).
"""
import time
import unittest

from sf_cosmolite import KEY, Cosmolite  # exits 77 without the package

import azure.cosmos.cosmos_client as cosmos_client  # noqa: E402
import azure.cosmos.documents as documents  # noqa: E402
import azure.cosmos.errors as errors  # noqa: E402


def client_for(srv):
    policy = documents.ConnectionPolicy()
    policy.RequestTimeout = 15000
    return cosmos_client.CosmosClient(srv.endpoint, {"masterKey": KEY}, policy)


class RidLinks(unittest.TestCase):
    def setUp(self):
        self.srv = Cosmolite("--partitions", "3")
        self.c = client_for(self.srv)

    def tearDown(self):
        self.srv.stop()

    def test_everything_by_self_link(self):
        c = self.c
        db = c.CreateDatabase({"id": "ridpy"})
        coll = c.CreateContainer(db["_self"], {"id": "orders", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}})
        self.assertEqual(coll["_self"], "dbs/%s/colls/%s/" % (db["_rid"], coll["_rid"]))
        self.assertEqual(c.ReadDatabase(db["_self"])["_rid"], db["_rid"])
        self.assertEqual(c.ReadContainer(coll["_self"])["_rid"], coll["_rid"])

        docs = [c.CreateItem(coll["_self"], {"id": "d%d" % i, "pk": "p%d" % i, "v": i}) for i in range(30)]
        d = docs[7]
        self.assertEqual(c.ReadItem(d["_self"], {"partitionKey": "p7"})["_rid"], d["_rid"])
        d["v"] = 700
        self.assertEqual(c.ReplaceItem(d["_self"], d, {"partitionKey": "p7"})["v"], 700)
        c.DeleteItem(docs[8]["_self"], {"partitionKey": "p8"})
        with self.assertRaises(errors.HTTPFailure) as gone:
            c.ReadItem(docs[8]["_self"], {"partitionKey": "p8"})
        self.assertEqual(gone.exception.status_code, 404)

        # v3's own cross-partition pipeline, over the ranges of the RID link.
        q = {"enableCrossPartitionQuery": True}
        ids = sorted(x["id"] for x in c.QueryItems(coll["_self"], "SELECT * FROM c", q))
        self.assertEqual(ids, sorted("d%d" % i for i in range(30) if i != 8))
        self.assertEqual(list(c.QueryItems(coll["_self"], "SELECT VALUE c.v FROM c WHERE c.id = 'd7'", q)), [700])
        self.assertEqual(len(list(c.ReadItems(coll["_self"]))), 29)

        sp = c.CreateStoredProcedure(coll["_self"], {"id": "sp", "body": "function () {}"})
        self.assertEqual(c.ReadStoredProcedure(sp["_self"])["_rid"], sp["_rid"])

    def test_pkranges_feed_shape_and_a_merge(self):
        c = self.c
        db = c.CreateDatabase({"id": "pkr"})
        coll = c.CreateContainer(db["_self"], {"id": "c", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}})
        for i in range(20):
            c.CreateItem(coll["_self"], {"id": "d%d" % i, "pk": "p%d" % i})
        ranges = sorted(c._ReadPartitionKeyRanges(coll["_self"]), key=lambda r: r["minInclusive"])
        self.assertEqual([r["id"] for r in ranges], ["0", "1", "2"])
        for r in ranges:
            for f in ("minInclusive", "maxExclusive", "lsn", "ridPrefix", "throughputFraction", "status", "parents"):
                self.assertIn(f, r)
            self.assertEqual(r["status"], "online")
            self.assertAlmostEqual(r["throughputFraction"], 1 / 3)

        # The merge endpoint is signed like any request (resource type "_admin").
        import json
        import urllib.request
        from azure.cosmos import auth

        body = json.dumps({"db": "pkr", "coll": "c", "ranges": ["1", "2"]}).encode()
        date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
        headers = {"x-ms-date": date, "x-ms-version": "2018-12-31", "Content-Type": "application/json"}
        headers["authorization"] = auth.GetAuthorizationHeader(c, "POST", "", "_admin/merge", True, "_admin", headers)
        req = urllib.request.Request(self.srv.endpoint + "_admin/merge", data=body, headers=headers, method="POST")
        with urllib.request.urlopen(req, timeout=15) as resp:
            self.assertEqual(resp.status, 200)
            merged = json.loads(resp.read())["merged"]
        self.assertEqual(merged["parents"], ["1", "2"])
        after = sorted(c._ReadPartitionKeyRanges(coll["_self"]), key=lambda r: r["minInclusive"])
        self.assertEqual([r["id"] for r in after], ["0", merged["id"]])
        self.assertEqual(after[1]["minInclusive"], ranges[1]["minInclusive"])
        self.assertEqual(after[1]["maxExclusive"], "FF")
        # A new client (fresh routing map) queries across the merged ranges.
        fresh = client_for(self.srv)
        got = list(fresh.QueryItems(coll["_self"], "SELECT VALUE c.id FROM c", {"enableCrossPartitionQuery": True}))
        self.assertEqual(sorted(got), sorted("d%d" % i for i in range(20)))


if __name__ == "__main__":
    unittest.main()
