// A split under an open ORDER BY iterator with the gateway's query plans on
// (cosmolite --gateway-query-plans, docs/azure-qplan.md): the SDK runs one
// rewritten ORDER BY query per range; when a range splits between two pages it
// gets 410/1002 for the parent, re-plans onto the children with the parent's
// continuation and must still return the global answer: every document once, in
// order, and the iterator ends. The answer is computed here from the documents written.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { adminRequest, drainQuery, rawRequest, show, splitRange, startCosmolite, uid } from "./harness.mjs";

const PARTITIONS = 3;
const N = 60;
let srv;
let client;
let database;

before(async () => {
  srv = await startCosmolite(null, { partitions: PARTITIONS, args: ["--gateway-query-plans"] });
  client = srv.client();
  ({ database } = await client.databases.create({ id: uid("db") }));
});
after(async () => {
  await srv?.stop();
});

/** A container with N documents: n is a permutation of 0..N-1, so ORDER BY c.n has one answer. */
async function filled() {
  const { container } = await database.containers.create({ id: uid("coll"), partitionKey: "/pk" });
  const docs = [];
  for (let i = 0; i < N; i++) {
    const d = { id: `d${i}`, pk: `p${i % 17}`, n: (i * 37) % N, g: i % 4 };
    await container.items.create(d);
    docs.push(d);
  }
  return { container, docs };
}

async function onlineRanges(container) {
  const { resources } = await container.readPartitionKeyRanges().fetchAll();
  return resources.map((r) => r.id);
}

/** Opens the iterator, reads one page, splits every range, drains; returns every row. */
async function readAcrossSplit(container, query, pageSize) {
  const it = container.items.query(query, { maxItemCount: pageSize });
  const first = await it.fetchNext();
  assert.ok(first.resources.length > 0, "the first page has rows");
  for (const id of await onlineRanges(container)) {
    const r = await splitRange(srv, database.id, container.id, id);
    assert.equal(r.status, 200, `split of range ${id}: ${show(r)}`);
  }
  assert.equal((await onlineRanges(container)).length, 2 * PARTITIONS, "every range split in two");
  // Bounded: an iterator that never ends fails here instead of hanging the test.
  const rest = await drainQuery(it, { maxPages: 200 });
  return [...first.resources, ...rest.items];
}

test("an ORDER BY iterator open across a split returns every document once, in order, and ends", async () => {
  const { container, docs } = await filled();
  const got = await readAcrossSplit(container, "SELECT c.id, c.n FROM c ORDER BY c.n", 7);
  const want = [...docs].sort((a, b) => a.n - b.n).map((d) => ({ id: d.id, n: d.n }));
  assert.deepEqual(got, want);
});

test("ORDER BY DESC over two fields across a split: the global order, no duplicates, no loss", async () => {
  const { container, docs } = await filled();
  const got = await readAcrossSplit(container, "SELECT VALUE c.id FROM c ORDER BY c.g DESC, c.n DESC", 5);
  const want = [...docs].sort((a, b) => b.g - a.g || b.n - a.n).map((d) => d.id);
  assert.deepEqual(got, want);
});

test("TOP with ORDER BY across a split: the first rows of the global order", async () => {
  const { container, docs } = await filled();
  const got = await readAcrossSplit(container, "SELECT TOP 25 c.id FROM c WHERE c.n >= 3 ORDER BY c.n", 4);
  const want = docs.filter((d) => d.n >= 3).sort((a, b) => a.n - b.n).slice(0, 25).map((d) => ({ id: d.id }));
  assert.deepEqual(got, want);
});

test("an ORDER BY iterator open across a merge of two ranges returns the global order and ends", async () => {
  const { container, docs } = await filled();
  const it = container.items.query("SELECT VALUE c.n FROM c ORDER BY c.n DESC", { maxItemCount: 6 });
  const first = await it.fetchNext();
  assert.ok(first.resources.length > 0, "the first page has rows");
  const r = await adminRequest(srv, "POST", "merge", { db: database.id, coll: container.id, ranges: ["1", "2"] });
  assert.equal(r.status, 200, `merge of ranges 1 and 2: ${show(r)}`);
  assert.equal((await onlineRanges(container)).length, PARTITIONS - 1, "two ranges became one");
  const rest = await drainQuery(it, { maxPages: 200 });
  assert.deepEqual([...first.resources, ...rest.items], docs.map((d) => d.n).sort((a, b) => b - a));
});

test("raw: a retired range's query continuation continues over its EPK span; a fresh query there is 410/1002", async () => {
  const { container } = await filled();
  const path = `/dbs/${database.id}/colls/${container.id}/docs`;
  const q = (headers) =>
    rawRequest(srv, {
      method: "POST",
      path,
      headers: { "content-type": "application/query+json", "x-ms-documentdb-isquery": "True", "x-ms-documentdb-query-enablecrosspartition": "True", "x-ms-documentdb-partitionkeyrangeid": "0", ...headers },
      body: { query: "SELECT VALUE c.id FROM c" },
    });
  const whole = await q({ "x-ms-max-item-count": "1000" });
  assert.equal(whole.status, 200, show(whole));
  const head = await q({ "x-ms-max-item-count": "3" });
  assert.equal(head.status, 200, show(head));
  const cont = head.headers["x-ms-continuation"];
  assert.ok(cont, `a continuation: ${show(head)}`);
  assert.equal((await splitRange(srv, database.id, container.id, "0")).status, 200);
  const tail = await q({ "x-ms-max-item-count": "1000", "x-ms-continuation": cont });
  assert.equal(tail.status, 200, `the continuation on the retired range: ${show(tail)}`);
  assert.deepEqual([...head.json.Documents, ...tail.json.Documents], whole.json.Documents, "the same rows in the same order");
  const fresh = await q({});
  assert.equal(fresh.status, 410, show(fresh));
  assert.equal(fresh.headers["x-ms-substatus"], "1002");
});
