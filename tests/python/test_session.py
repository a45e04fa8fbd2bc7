"""A second referee for cosmolite's session consistency (issue 15, behaviour 3):
Debian's python3-azure-cosmos (the v3 SDK) defaults to consistency "Session",
files the session tokens of its document writes by x-ms-alt-content-path and
the body's _self (azure/cosmos/session.py), and sends them back. Under
--replica-lag it must read its own writes; the same SDK with consistency
"Eventual" sends no token and is served by a secondary that has not applied
them; "Strong" is refused, as a Session account refuses it.

Run: COSMOLITE_BIN=build/emulator/cosmolite /usr/bin/python3 tests/python/test_session.py
Exit status 0 passed, 1 failed, 77 skipped (the package is not installed).
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sf_cosmolite import KEY, Cosmolite  # noqa: E402 (exits 77 without the SDK)

import azure.cosmos.cosmos_client as cosmos_client  # noqa: E402
import azure.cosmos.documents as documents  # noqa: E402
import azure.cosmos.errors as errors  # noqa: E402

# Longer than any run of this test: every write stays unapplied on the secondaries.
LAG_MS = "600000"


def client_for(srv, consistency="Session"):
    policy = documents.ConnectionPolicy()
    policy.RequestTimeout = 15000
    return cosmos_client.CosmosClient(srv.endpoint, {"masterKey": KEY}, policy, consistency)


class Session(unittest.TestCase):
    def test_reads_its_own_writes_and_eventual_misses_them(self):
        srv = Cosmolite("--partitions", "2", "--replica-lag", LAG_MS)
        try:
            c = client_for(srv)
            c.CreateDatabase({"id": "pydb"})
            c.CreateContainer("dbs/pydb", {"id": "c", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}})
            link = "dbs/pydb/colls/c"
            for i in range(6):
                c.CreateItem(link, {"id": "d%d" % i, "pk": "p%d" % i, "v": 1})
            self.assertRegex(c.last_response_headers["x-ms-session-token"], r"^\d+:-1#\d+$")
            c.ReplaceItem(link + "/docs/d3", {"id": "d3", "pk": "p3", "v": 2})

            got = c.ReadItem(link + "/docs/d3", {"partitionKey": "p3"})
            self.assertEqual(got["v"], 2, "Session reads its own replace")
            rows = list(c.QueryItems(link, "SELECT VALUE c.v FROM c WHERE c.pk = 'p3'", {"partitionKey": "p3"}))
            self.assertEqual(rows, [2], "and queries it")

            eventual = client_for(srv, "Eventual")
            with self.assertRaises(errors.HTTPFailure) as ctx:
                eventual.ReadItem(link + "/docs/d3", {"partitionKey": "p3"})
            self.assertEqual(ctx.exception.status_code, 404, "the secondary has not applied the create")
            rows = list(eventual.QueryItems(link, "SELECT * FROM c", {"enableCrossPartitionQuery": True}))
            self.assertEqual(rows, [], "nor any other write")

            strong = client_for(srv, "Strong")
            with self.assertRaises(errors.HTTPFailure) as ctx:
                strong.ReadItem(link + "/docs/d3", {"partitionKey": "p3"})
            self.assertEqual(ctx.exception.status_code, 400, "a request may only weaken Session")
        finally:
            srv.stop()


if __name__ == "__main__":
    unittest.main()
