"""A second referee for cosmolite's server-side JavaScript (docs/azure-scripts.md):
Debian's python3-azure-cosmos (the v3 SDK) registers and executes stored
procedures by name links, as v3 applications do.

Run: COSMOLITE_BIN=build/emulator/cosmolite /usr/bin/python3 tests/python/test_scripts.py
Exit status 0 passed, 1 failed, 77 skipped (the package is not installed).
"""
import unittest

from sf_cosmolite import KEY, Cosmolite  # exits 77 without the package

import azure.cosmos.cosmos_client as cosmos_client  # noqa: E402
import azure.cosmos.documents as documents  # noqa: E402
import azure.cosmos.errors as errors  # noqa: E402

ADD_ORDER = """function addOrder(order) {
  var c = getContext().getCollection();
  if (!c.createDocument(c.getSelfLink(), order, function (err, created) {
        if (err) throw err;
        getContext().getResponse().setBody(created.id);
      })) throw new Error('not accepted');
}"""

THREE_THEN_THROW = """function () {
  var c = __;
  c.createDocument(c.getSelfLink(), {id: 'a', pk: 'p'});
  c.createDocument(c.getSelfLink(), {id: 'b', pk: 'p'});
  c.createDocument(c.getSelfLink(), {id: 'c', pk: 'p'}, function () { throw new Error('boom'); });
}"""


class Scripts(unittest.TestCase):
    def setUp(self):
        self.srv = Cosmolite("--script-timeout-ms", "500")
        policy = documents.ConnectionPolicy()
        policy.RequestTimeout = 15000
        self.c = cosmos_client.CosmosClient(self.srv.endpoint, {"masterKey": KEY}, policy)
        self.c.CreateDatabase({"id": "py"})
        self.coll = "dbs/py/colls/orders"
        self.c.CreateContainer("dbs/py", {"id": "orders", "partitionKey": {"paths": ["/pk"], "kind": "Hash"}})

    def tearDown(self):
        self.srv.stop()

    def sproc(self, sid, body):
        self.c.CreateStoredProcedure(self.coll, {"id": sid, "body": body})
        return self.coll + "/sprocs/" + sid

    def missing(self, doc_id, pk):
        with self.assertRaises(errors.HTTPFailure) as e:
            self.c.ReadItem(self.coll + "/docs/" + doc_id, {"partitionKey": pk})
        self.assertEqual(e.exception.status_code, 404)

    def test_add_order_returns_the_created_id(self):
        link = self.sproc("addOrder", ADD_ORDER)
        got = self.c.ExecuteStoredProcedure(link, [{"id": "o1", "pk": "c1", "total": 5}], {"partitionKey": "c1"})
        self.assertEqual(got, "o1")
        self.assertEqual(self.c.ReadItem(self.coll + "/docs/o1", {"partitionKey": "c1"})["total"], 5)

    def test_a_throw_leaves_nothing_and_carries_the_message(self):
        link = self.sproc("three", THREE_THEN_THROW)
        with self.assertRaises(errors.HTTPFailure) as e:
            self.c.ExecuteStoredProcedure(link, [], {"partitionKey": "p"})
        self.assertEqual(e.exception.status_code, 400)
        self.assertIn("boom", str(e.exception))
        for doc_id in ("a", "b", "c"):
            self.missing(doc_id, "p")

    def test_a_runaway_script_is_stopped_and_the_server_serves_on(self):
        link = self.sproc("spin", "function () { __.createDocument(__.getSelfLink(), {id: 's', pk: 'p'}); for (;;) {} }")
        with self.assertRaises(errors.HTTPFailure) as e:
            self.c.ExecuteStoredProcedure(link, [], {"partitionKey": "p"})
        self.assertEqual(e.exception.status_code, 408)
        self.missing("s", "p")
        self.c.CreateItem(self.coll, {"id": "after", "pk": "p"})
        self.assertEqual(self.c.ReadItem(self.coll + "/docs/after", {"partitionKey": "p"})["id"], "after")

    def test_a_pre_trigger_changes_the_document_when_named(self):
        self.c.CreateTrigger(self.coll, {
            "id": "stamp", "triggerType": "Pre", "triggerOperation": "All",
            "body": "function () { var r = getContext().getRequest(), d = r.getBody(); d.stamped = true; r.setBody(d); }",
        })
        self.c.CreateTrigger(self.coll, {
            "id": "veto", "triggerType": "Post", "triggerOperation": "Create",
            "body": "function () { throw new Error('vetoed'); }",
        })
        self.assertNotIn("stamped", self.c.CreateItem(self.coll, {"id": "plain", "pk": "p"}))
        made = self.c.CreateItem(self.coll, {"id": "t", "pk": "p"}, {"preTriggerInclude": "stamp"})
        self.assertTrue(made["stamped"])
        with self.assertRaises(errors.HTTPFailure) as e:
            self.c.CreateItem(self.coll, {"id": "v", "pk": "p"}, {"postTriggerInclude": "veto"})
        self.assertEqual(e.exception.status_code, 400)
        self.missing("v", "p")

    def test_a_udf_in_select_and_where(self):
        self.c.CreateUserDefinedFunction(self.coll, {"id": "tax", "body": "function (x) { return x / 5; }"})
        for i in range(1, 4):
            self.c.CreateItem(self.coll, {"id": "o%d" % i, "pk": "p%d" % i, "total": i * 10})
        got = list(self.c.QueryItems(self.coll, "SELECT VALUE udf.tax(c.total) FROM c WHERE udf.tax(c.total) > 2",
                                     {"enableCrossPartitionQuery": True}))
        self.assertEqual(sorted(got), [4, 6])


if __name__ == "__main__":
    unittest.main()
