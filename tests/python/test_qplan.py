"""A second referee for the gateway's query behaviour (issue 15, behaviour 6):
Debian's python3-azure-cosmos (the v3 SDK) sends a cross-partition query bare,
reads the plan from the 400/1004 error's additionalErrorInfo, sends the
rewritten query to every partition key range and merges ORDER BY, TOP and
VALUE aggregates itself. With cosmolite --gateway-query-plans every range
answers only for itself, so a right answer proves the SDK's merge got what
Azure's gateway would have sent.

Run: COSMOLITE_BIN=build/emulator/cosmolite /usr/bin/python3 tests/python/test_qplan.py
Exit status 0 passed, 1 failed, 77 skipped (the package is not installed).
"""
import unittest

from sf_cosmolite import Cosmolite  # exits 77 without the package
from test_throughput import client_for

TEAMS = ["red", "green", "blue"]


class QueryPlans(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Cosmolite("--partitions", "4", "--gateway-query-plans", "--log-level", "debug")
        cls.c = client_for(cls.srv)
        cls.c.CreateDatabase({"id": "pydb"})
        cls.link = "dbs/pydb/colls/q"
        cls.c.CreateContainer("dbs/pydb", {"id": "q", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}})
        cls.docs = []
        for i in range(36):
            d = {"id": "d%d" % i, "pk": "p%d" % (i % 11), "n": (i * 25) % 36, "team": TEAMS[i % 3]}
            cls.c.CreateItem(cls.link, d)
            cls.docs.append(d)

    @classmethod
    def tearDownClass(cls):
        log = cls.srv.stop()
        # The SDK took the plan from 400/1004 and sent each range its rewritten query.
        assert "(query) -> 400" in log, "no bare query was refused with the plan"
        assert log.count("(query) -> 200") >= 4 * 8, "the ranges were queried one by one"

    def query(self, text):
        return list(self.c.QueryItems(self.link, text, {"enableCrossPartitionQuery": True, "maxItemCount": 5}))

    def test_order_by_asc_and_desc_give_the_global_order(self):
        by_n = sorted(self.docs, key=lambda d: d["n"])
        self.assertEqual([r["id"] for r in self.query("SELECT * FROM c ORDER BY c.n")], [d["id"] for d in by_n])
        self.assertEqual(
            [r["id"] for r in self.query("SELECT c.id FROM c ORDER BY c.n DESC")], [d["id"] for d in reversed(by_n)]
        )

    def test_top_with_order_by_gives_the_global_top(self):
        by_n = sorted(self.docs, key=lambda d: -d["n"])
        self.assertEqual(self.query("SELECT TOP 4 VALUE c.n FROM c ORDER BY c.n DESC"), [d["n"] for d in by_n[:4]])

    def test_value_aggregates_give_the_global_values(self):
        ns = [d["n"] for d in self.docs]
        self.assertEqual(self.query("SELECT VALUE COUNT(1) FROM c"), [len(ns)])
        self.assertEqual(self.query("SELECT VALUE SUM(c.n) FROM c"), [sum(ns)])
        self.assertEqual(self.query("SELECT VALUE MIN(c.n) FROM c WHERE c.n > 3"), [4])
        self.assertEqual(self.query("SELECT VALUE MAX(c.team) FROM c"), [max(TEAMS)])
        self.assertEqual(self.query("SELECT VALUE AVG(c.n) FROM c"), [sum(ns) / len(ns)])
        # One document: the other ranges' partials are empty ([{}]) and skipped.
        self.assertEqual(self.query("SELECT VALUE MIN(c.n) FROM c WHERE c.id = 'd7'"), [self.docs[7]["n"]])
        red = [d for d in self.docs if d["team"] == "red"]
        self.assertEqual(self.query("SELECT VALUE COUNT(1) FROM c WHERE c.team = 'red'"), [len(red)])


if __name__ == "__main__":
    unittest.main()
