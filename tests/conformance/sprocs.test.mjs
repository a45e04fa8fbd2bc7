// Stored procedures that run (docs/azure-scripts.md), refereed by the official
// SDK: container.scripts.storedProcedure(id).execute(pk, params). One cosmolite
// with the default limits, one with small ones (the limits' tests).
import assert from "node:assert/strict";
import { test } from "node:test";

import { drainChangeFeed, httpCode as code, newContainer, rawRequest, show, startWithDatabase } from "./harness.mjs";
import { ChangeFeedStartFrom, PartitionKeyKind } from "@azure/cosmos";

let env, small, brief;
test.before(async () => {
  env = await startWithDatabase({ memory: true });
  // Small limits, so the limits' tests are quick: 8 MiB heap, 4 KiB responses, 3 writes; a
  // budget no loaded machine reaches, so that only the bound under test decides.
  small = await startWithDatabase({
    memory: true,
    args: ["--script-timeout-ms", "600000", "--script-max-memory", "8m", "--script-max-response", "4k", "--script-max-writes", "3"],
  });
  // The budget alone: 800 ms.
  brief = await startWithDatabase({ memory: true, args: ["--script-timeout-ms", "800"] });
});
test.after(async () => {
  await env?.srv.stop();
  await small?.srv.stop();
  await brief?.srv.stop();
});

async function withSproc(e, id, body) {
  const { container } = await newContainer(e.database);
  await container.scripts.storedProcedures.create({ id, body });
  return container;
}

const exec = (container, id, pk, params = []) => container.scripts.storedProcedure(id).execute(pk, params);

/** Rejects with status (and the message matching re, when given). */
function failsWith(status, re) {
  return (e) => {
    code(status)(e);
    if (re) assert.match(e.message ?? JSON.stringify(e.body), re, `the message: ${e.message}`);
    return true;
  };
}

test("the seed scenario: addOrder registers, executes and returns the created id", async () => {
  const container = await withSproc(
    env,
    "addOrder",
    `function addOrder(order) {
       var c = getContext().getCollection();
       var accepted = c.createDocument(c.getSelfLink(), order, function (err, created) {
         if (err) throw err;
         getContext().getResponse().setBody(created.id);
       });
       if (!accepted) throw new Error("not accepted");
     }`,
  );
  const res = await exec(container, "addOrder", "cust-1", [{ id: "order-1", pk: "cust-1", total: 42 }]);
  assert.equal(res.statusCode, 200);
  assert.equal(res.resource, "order-1", "the procedure's body is the created id");
  const { resource } = await container.item("order-1", "cust-1").read();
  assert.equal(resource.total, 42);
  assert.match(resource._etag, /^".+"$/, "the stored document has its real system properties");
  // An id the procedure generates (no disableAutomaticIdGeneration).
  const gen = await exec(container, "addOrder", "cust-1", [{ pk: "cust-1", total: 7 }]);
  assert.match(gen.resource, /^[0-9a-f-]{36}$/, `a generated id: ${gen.resource}`);
  assert.equal((await container.item(gen.resource, "cust-1").read()).resource.total, 7);
});

test("a procedure that creates three documents and then throws leaves none, and says why", async () => {
  const container = await withSproc(
    env,
    "threeThenThrow",
    `function () {
       var c = getContext().getCollection();
       ['a', 'b', 'c'].forEach(function (id) {
         c.createDocument(c.getSelfLink(), { id: id, pk: 'p' }, function (err) {
           if (err) throw err;
           if (id === 'c') throw new Error('boom after three');
         });
       });
     }`,
  );
  const feed = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  await assert.rejects(exec(container, "threeThenThrow", "p"), failsWith(400, /boom after three/));
  for (const id of ["a", "b", "c"]) {
    assert.equal((await container.item(id, "p").read()).statusCode, 404, `${id} was rolled back`);
  }
  assert.deepEqual((await drainChangeFeed(feed)).items, [], "the change feed shows nothing of it");
});

test("a committed procedure's writes reach the change feed together; its reads see its writes", async () => {
  const container = await withSproc(
    env,
    "rw",
    `function (n) {
       var c = __, self = c.getSelfLink(), out = {};
       c.upsertDocument(self, { id: 'k', pk: 'p', v: 1 }, function (err, d) {
         if (err) throw err;
         out.upsert = d.v;
         c.readDocument(self + 'docs/k', function (err, r) {
           if (err) throw err;
           out.read = r.v;
           c.replaceDocument(self + 'docs/k', { id: 'k', pk: 'p', v: 2 }, { etag: r._etag }, function (err, d2) {
             if (err) throw err;
             c.replaceDocument(self + 'docs/k', { id: 'k', pk: 'p', v: 3 }, { etag: r._etag }, function (err) {
               out.staleEtag = err.number;
               for (var i = 0; i < n; i++) c.createDocument(self, { id: 'n' + i, pk: 'p' });
               c.queryDocuments(self, { query: 'SELECT VALUE c.id FROM c WHERE c.pk = @p', parameters: [{ name: '@p', value: 'p' }] }, function (err, ids) {
                 if (err) throw err;
                 out.ids = ids.sort();
                 c.deleteDocument(self + 'docs/n0', {}, function (err) {
                   if (err) throw err;
                   c.readDocument(self + 'docs/n0', function (err) {
                     out.afterDelete = err.number;
                     c.readDocuments(self, function (err, docs) {
                       out.count = docs.length;
                       getContext().getResponse().setBody(out);
                     });
                   });
                 });
               });
             });
           });
         });
       });
     }`,
  );
  await container.items.create({ id: "before", pk: "p" });
  const feed = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now() });
  await drainChangeFeed(feed);
  const { resource } = await exec(container, "rw", "p", [3]);
  assert.deepEqual(resource, {
    upsert: 1,
    read: 1,
    staleEtag: 412,
    ids: ["before", "k", "n0", "n1", "n2"],
    afterDelete: 404,
    count: 4,
  });
  assert.equal((await container.item("k", "p").read()).resource.v, 2);
  assert.equal((await container.item("n0", "p").read()).statusCode, 404);
  const changes = (await drainChangeFeed(feed)).items;
  assert.deepEqual(changes.map((d) => d.id).sort(), ["k", "n1", "n2"], "the committed writes, once each");
  assert.equal(new Set(changes.map((d) => d._lsn)).size, 1, "one transaction, one LSN");
});

test("documents are reached by their _self links too, as Azure's samples write them", async () => {
  const container = await withSproc(
    env,
    "bySelf",
    `function (id) {
       var c = __, self = c.getSelfLink();
       c.readDocument(self + 'docs/' + id, function (err, d) {
         if (err) throw err;
         d.n = (d.n || 0) + 1;
         c.replaceDocument(d._self, d, { etag: d._etag }, function (err) {
           if (err) throw err;
           c.readDocument(d._self, function (err, again) {
             if (err) throw err;
             c.queryDocuments(self, "SELECT * FROM c WHERE c.id = 'gone'", function (err, docs) {
               if (err) throw err;
               c.deleteDocument(docs[0]._self, function (err) {
                 if (err) throw err;
                 getContext().getResponse().setBody({ n: again.n });
               });
             });
           });
         });
       });
     }`,
  );
  await container.items.create({ id: "d", pk: "p", n: 1 });
  await container.items.create({ id: "gone", pk: "p" });
  const { resource } = await exec(container, "bySelf", "p", ["d"]);
  assert.deepEqual(resource, { n: 2 });
  assert.equal((await container.item("d", "p").read()).resource.n, 2);
  assert.equal((await container.item("gone", "p").read()).statusCode, 404);
});

test("a procedure in a container with a hierarchical key runs in the full key it names", async () => {
  const { container } = await env.database.containers.create({
    id: `hk-${Date.now()}`,
    partitionKey: { paths: ["/tenantId", "/userId"], kind: PartitionKeyKind.MultiHash, version: 2 },
  });
  await container.scripts.storedProcedures.create({
    id: "hk",
    body: `function (doc) {
      var c = __, out = [];
      c.createDocument(c.getSelfLink(), doc, function (err, d) { out.push(err ? err.number : d.id); });
      c.createDocument(c.getSelfLink(), { id: 'other', tenantId: doc.tenantId, userId: 'someone-else' },
        function (err) { out.push(err ? err.number : 'created'); getContext().getResponse().setBody(out); });
    }`,
  });
  const { resource } = await container.scripts.storedProcedure("hk").execute(["t1", "u1"], [{ id: "a", tenantId: "t1", userId: "u1" }]);
  assert.deepEqual(resource, ["a", 400], "its own key is accepted, another user's is not");
  assert.equal((await container.item("a", ["t1", "u1"]).read()).statusCode, 200);
});

test("a procedure stays in its partition and its collection", async () => {
  const container = await withSproc(
    env,
    "escape",
    `function (link) {
       var c = getContext().getCollection(), out = [];
       c.createDocument(c.getSelfLink(), { id: 'x', pk: 'other' }, function (err) { out.push(err && err.number); });
       c.createDocument(link, { id: 'y', pk: 'p' }, function (err) { out.push(err && err.number); });
       c.createDocument(c.getSelfLink(), { id: 'z', pk: 'p' }, { disableAutomaticIdGeneration: 'yes' }, function (err) { out.push(err && err.number); });
       c.readDocument(c.getSelfLink() + 'docs/w', function (err) {
         out.push(err && err.number);
         getContext().getResponse().setBody(out);
       });
     }`,
  );
  await container.items.create({ id: "w", pk: "elsewhere" });
  const { resource } = await exec(container, "escape", "p", [`dbs/${env.database.id}/colls/not-this-one`]);
  assert.deepEqual(resource, [400, 400, 400, 404], "other partition, other collection, bad option; a document of another partition is not found");
  assert.equal((await container.item("x", "other").read()).statusCode, 404);
});

test("the sandbox has no I/O, timers or engine internals; errors carry the script's message", async () => {
  const container = await withSproc(
    env,
    "probe",
    `function () {
       getContext().getResponse().setBody([typeof require, typeof setTimeout, typeof Duktape, typeof process,
         typeof getContext, typeof __, ErrorCodes.Conflict]);
     }`,
  );
  const { resource } = await exec(container, "probe", "p");
  assert.deepEqual(resource, ["undefined", "undefined", "undefined", "undefined", "function", "object", 409]);
  await container.scripts.storedProcedures.create({ id: "syntax", body: "function ( {" });
  await assert.rejects(exec(container, "syntax", "p"), failsWith(400, /SyntaxError/));
  await assert.rejects(exec(container, "missing", "p"), code(404));
  const r = await rawRequest(env.srv, {
    method: "POST",
    path: `/dbs/${env.database.id}/colls/${container.id}/sprocs/probe`,
    body: [],
  });
  assert.equal(r.status, 400, `no partition key header: ${show(r)}`);
});

test("a runaway loop is stopped at the budget and rolled back; cosmolite keeps serving", async () => {
  const container = await withSproc(
    brief,
    "spin",
    `function () {
       var c = getContext().getCollection();
       c.createDocument(c.getSelfLink(), { id: 'spun', pk: 'p' });
       while (true) { try { while (true) {} } catch (e) {} }
     }`,
  );
  await container.items.create({ id: "other", pk: "p" });
  const running = exec(container, "spin", "p").then(
    () => assert.fail("the loop answered 200"),
    (e) => e,
  );
  // Reads and writes of the same partition are served while it spins.
  for (let i = 0; i < 5; i++) {
    assert.equal((await container.item("other", "p").read()).statusCode, 200);
    await container.items.upsert({ id: "other", pk: "p", i });
  }
  const e = await running;
  code(408)(e);
  assert.equal((await container.item("spun", "p").read()).statusCode, 404, "its write was rolled back");
  assert.equal((await container.item("other", "p").read()).resource.i, 4);
});

test("a script waits on a document another request writes: nothing is held while it runs", async () => {
  // The procedure polls (through callbacks) until 'flag' exists; only a
  // request served while it runs can write it, so finishing proves it.
  const e2 = await startWithDatabase({ memory: true, args: ["--script-timeout-ms", "120000"] });
  try {
    const container = await withSproc(
      e2,
      "waitFlag",
      `function () {
         var c = getContext().getCollection(), polls = 0;
         function poll() {
           polls++;
           var ok = c.readDocument(c.getSelfLink() + 'docs/flag', function (err, d) {
             if (err) return poll();
             getContext().getResponse().setBody({ flag: d.v, polled: polls > 0 });
           });
           if (!ok) throw new Error('budget ran out before the flag appeared');
         }
         poll();
       }`,
    );
    const running = exec(container, "waitFlag", "p");
    await container.items.create({ id: "flag", pk: "p", v: "set" });
    const { resource } = await running;
    assert.deepEqual(resource, { flag: "set", polled: true });
  } finally {
    await e2.srv.stop();
  }
});

test("a huge allocation and deep recursion fail the script, not the server", async () => {
  const container = await withSproc(small, "hog", `function () { var a = [], s = 'xxxxxxxx'; while (true) { s = s + s; a.push(s); } }`);
  await container.scripts.storedProcedures.create({ id: "deep", body: "function () { function f(n) { return f(n + 1) + 1; } f(0); }" });
  await container.scripts.storedProcedures.create({ id: "deepJson", body: "function () { var o = {}; for (var i = 0; i < 10000; i++) o = {o: o}; JSON.stringify(o); }" });
  await assert.rejects(exec(container, "hog", "p"), failsWith(400, /memory/));
  await assert.rejects(exec(container, "deep", "p"), failsWith(400, /RangeError/));
  await assert.rejects(exec(container, "deepJson", "p"), code(400));
  await container.items.create({ id: "still-here", pk: "p" });
  assert.equal((await container.item("still-here", "p").read()).statusCode, 200);
});

test("the response bound is 413, and a write past the write bound answers not accepted", async () => {
  const container = await withSproc(small, "big", `function () { getContext().getResponse().setBody(new Array(5000).join('y')); }`);
  await assert.rejects(exec(container, "big", "p"), code(413));
  // The continuation pattern: write until a call is not accepted, return how far it got.
  await container.scripts.storedProcedures.create({
    id: "bulk",
    body: `function (from, n) {
      var c = __, i = from;
      for (; i < n; i++) if (!c.createDocument(c.getSelfLink(), { id: 'b' + i, pk: 'p' })) break;
      getContext().getResponse().setBody({ next: i });
    }`,
  });
  let from = 0, calls = 0;
  while (from < 8) {
    ({ resource: { next: from } } = await exec(container, "bulk", "p", [from, 8]));
    calls++;
  }
  assert.equal(calls, 3, "3 + 3 + 2 writes");
  const { resources } = await container.items.query("SELECT VALUE c.id FROM c").fetchAll();
  assert.equal(resources.length, 8);
});
// A concurrent change to a document a procedure read and then wrote (449): test_emu_script.c
// (test_tx_concurrent_write), where the order of the two writers is fixed.
