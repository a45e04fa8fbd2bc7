"""A second referee for cosmolite's provisioned throughput (issue 15,
behaviour 2): Debian's python3-azure-cosmos (the v3 SDK, a different code base
from @azure/cosmos). It creates a container with offerThroughput 400, finds
its offer the way the v3 SDK does (QueryOffers by resource link), lets its own
ResourceThrottleRetryPolicy absorb the 429/3200s of a write burst, and replaces
the offer at run time.

Run: COSMOLITE_BIN=build/emulator/cosmolite /usr/bin/python3 tests/python/test_throughput.py
Exit status 0 passed, 1 failed, 77 skipped (the package is not installed).
"""
import re
import time
import unittest

from sf_cosmolite import KEY, Cosmolite  # exits 77 without the package

import azure.cosmos.cosmos_client as cosmos_client  # noqa: E402
import azure.cosmos.documents as documents  # noqa: E402
import azure.cosmos.retry_options as retry_options  # noqa: E402


def client_for(srv):
    policy = documents.ConnectionPolicy()
    policy.RequestTimeout = 15000
    # Generous throttle retries: the test is about outcomes, not the default cap of 9.
    policy.RetryOptions = retry_options.RetryOptions(1000, None, 120)
    return cosmos_client.CosmosClient(srv.endpoint, {"masterKey": KEY}, policy)


class Throughput(unittest.TestCase):
    def test_offer_429_retries_and_replace(self):
        srv = Cosmolite("--partitions", "1")
        try:
            c = client_for(srv)
            c.CreateDatabase({"id": "pydb"})
            # Name-based links: RID-based addressing is another behaviour of issue 15.
            link = "dbs/pydb/colls/orders"
            coll = c.CreateContainer(
                "dbs/pydb",
                {"id": "orders", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}},
                {"offerThroughput": 400},
            )
            charge = float(c.last_response_headers["x-ms-request-charge"])
            self.assertGreaterEqual(charge, 0)

            offers = list(
                c.QueryOffers(
                    {
                        "query": "SELECT * FROM root r WHERE r.resource = @link",
                        "parameters": [{"name": "@link", "value": coll["_self"]}],
                    }
                )
            )
            self.assertEqual(len(offers), 1, offers)
            offer = offers[0]
            self.assertEqual(offer["content"]["offerThroughput"], 400)
            self.assertEqual(offer["offerResourceId"], coll["_rid"])
            self.assertEqual(c.ReadOffer(offer["_self"])["id"], offer["id"])

            c.CreateItem(link, {"id": "small", "pk": "p", "pad": "x" * 900})
            write = float(c.last_response_headers["x-ms-request-charge"])
            self.assertTrue(5 <= write <= 7, "a 1 KiB create costs 5 to 6 RU: %s" % write)
            # A 1.5 MiB document costs ~940 RU, more than the bucket's second of 400: after
            # the first, the next write finds it empty unless 1.3 s passed in between. (100
            # writes of 64 KiB, ~6 s of budget, were not throttled once the loaded machine
            # took longer than that to send them.)
            n = 3
            for i in range(n):
                c.CreateItem(link, {"id": "d%d" % i, "pk": "p%d" % i, "pad": "x" * (1536 * 1024)})
            n += 1
            count = list(
                c.QueryItems(link, "SELECT VALUE COUNT(1) FROM c", {"enableCrossPartitionQuery": True})
            )
            self.assertEqual(count, [n], "every acknowledged write is there once")

            offer["content"]["offerThroughput"] = 100000
            replaced = c.ReplaceOffer(offer["_self"], offer)
            self.assertEqual(replaced["content"]["offerThroughput"], 100000)
            self.assertEqual(c.ReadOffer(offer["_self"])["content"]["offerThroughput"], 100000)
            self.assertEqual(len(list(c.ReadOffers())), 1)
        finally:
            log = srv.stop()
        # v3 overwrites last_response_headers after its retries, so the server counts the 429s
        # that the SDK's ResourceThrottleRetryPolicy absorbed (every write above succeeded).
        m = re.search(r"throughput: (\d+) requests were answered 429/3200", log)
        self.assertTrue(m and int(m.group(1)) > 0, "the burst was throttled: " + log[-500:])


if __name__ == "__main__":
    unittest.main()
