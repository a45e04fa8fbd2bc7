// Partition splits (POST /_admin/split) seen through the official SDK: a
// change-feed iterator that was running before the split keeps going and
// sees every change exactly once; readPartitionKeyRanges shows the children
// with "parents" naming the parent; requests scoped to the retired range get
// 410 with substatus 1002; queries and point operations keep working.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChangeFeedMode, ChangeFeedStartFrom } from "@azure/cosmos";

import { assertChanges, assertCovering, docKey as keyOf, drainChangeFeed, newContainer, pkHeaders, rawRequest, sdkEpk, show, sortedRanges, splitRange, startCosmolite, uid, useDatabase, writeRange } from "./harness.mjs";

let srv, client, database;
useDatabase((e) => ({ srv, client, database } = e));

function rawFeed(collId, headers) {
  return rawRequest(srv, { path: `/dbs/${database.id}/colls/${collId}/docs`, headers: { "a-im": "Incremental Feed", ...headers } });
}

test("a running change-feed iterator sees every change exactly once across a split", async () => {
  const { container, id: collId } = await newContainer(database);
  const first = await writeRange(container, 0, 20);
  const [parent] = await sortedRanges(container);
  assert.equal(parent.id, "0");

  const drained = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 7 });
  const before = await drainChangeFeed(drained);
  assertChanges(before.items, first, "before the split");
  const token = before.last.continuationToken;

  // A second iterator stopped halfway through the backlog.
  const halfway = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 5 });
  const halfItems = [];
  for (let i = 0; i < 2; i++) halfItems.push(...(await halfway.readNext()).result);
  assert.equal(halfItems.length, 10, "two pages of 5");

  const split = await splitRange(srv, database.id, collId, "0");
  assert.equal(split.status, 200, show(split));
  assert.equal(split.json?.parent, "0", split.text);
  assert.ok(Array.isArray(split.json?.children) && split.json.children.length === 2, split.text);

  const more = await writeRange(container, 20, 40);
  const updated = [
    { id: "k1", pk: "pk-1", v: 2 },
    { id: "k7", pk: "pk-7", v: 2 },
    { id: "k25", pk: "pk-25", v: 2 },
  ];
  for (const d of updated) await container.items.upsert(d);
  const latest = new Map([...first, ...more, ...updated].map((d) => [keyOf(d), d]));
  const afterSplit = [...more.filter((d) => !updated.some((u) => keyOf(u) === keyOf(d))), ...updated];

  const tail = await drainChangeFeed(drained);
  assertChanges(tail.items, afterSplit, "the drained iterator, after the split");
  assert.equal((await drained.readNext()).statusCode, 304, "idle again after the split");

  const rest = await drainChangeFeed(halfway);
  assertChanges([...halfItems, ...rest.items], [...latest.values()], "the half-read iterator: backlog + new writes");

  const resumed = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(token) });
  assertChanges((await drainChangeFeed(resumed)).items, afterSplit, "a pre-split continuation token in a new iterator");

  const fresh = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 6 });
  const all = (await drainChangeFeed(fresh)).items;
  assertChanges(all, [...latest.values()], "a new iterator from the beginning after the split");
  assert.equal(all.length, latest.size, "each document once at its latest version");

  // The children's own feeds partition the container by EPK.
  const kids = await sortedRanges(container);
  const byKid = [];
  for (const r of kids) {
    const res = await rawFeed(collId, { "x-ms-documentdb-partitionkeyrangeid": r.id, "x-ms-max-item-count": "1000" });
    assert.equal(res.status, 200, `feed of child ${r.id}: ${show(res)}`);
    for (const d of res.json.Documents) {
      const epk = await sdkEpk(d.pk);
      assert.ok(epk >= r.minInclusive && (epk < r.maxExclusive || r.maxExclusive === "FF"), `${keyOf(d)} (EPK ${epk}) in child ${r.id} [${r.minInclusive}, ${r.maxExclusive})`);
    }
    byKid.push(...res.json.Documents);
  }
  assertChanges(byKid, [...latest.values()], "the children's feeds together");
});

test("readPartitionKeyRanges shows the children with parents naming the parent; the list's etag changes", async () => {
  const { container, id: collId } = await newContainer(database);
  const pkrPath = `/dbs/${database.id}/colls/${collId}/pkranges`;
  const before = await rawRequest(srv, { path: pkrPath });
  assert.equal(before.status, 200, show(before));
  const oldEtag = before.headers.etag;
  assert.ok(oldEtag, "the pkranges list has an etag");

  const split = await splitRange(srv, database.id, collId, "0");
  assert.equal(split.status, 200, show(split));
  const list = await sortedRanges(container);
  assert.equal(list.length, 2, JSON.stringify(list));
  assertCovering(list, "after one split");
  for (const r of list) {
    assert.notEqual(r.id, "0", "children get new ids");
    assert.deepEqual(r.parents, ["0"], `child ${r.id} names its parent`);
    assert.equal(r.status ?? "online", "online");
  }
  assert.deepEqual(list.map((r) => r.id).sort(), [...split.json.children].map((c) => (typeof c === "string" ? c : c.id)).sort(), "the split answer names the same children");
  assert.notEqual(list[0].id, list[1].id);

  const afterList = await rawRequest(srv, { path: pkrPath, headers: { "if-none-match": oldEtag, "a-im": "Incremental Feed" } });
  assert.equal(afterList.status, 200, `an old etag gets the new list: ${show(afterList)}`);
  assert.notEqual(afterList.headers.etag, oldEtag, "the list's etag changed");
  const idle = await rawRequest(srv, { path: pkrPath, headers: { "if-none-match": afterList.headers.etag, "a-im": "Incremental Feed" } });
  assert.equal(idle.status, 304, `the current etag is 304: ${show(idle)}`);

  // Split a child: the grandchildren list every ancestor.
  const child = list[1];
  const split2 = await splitRange(srv, database.id, collId, child.id);
  assert.equal(split2.status, 200, show(split2));
  const list2 = await sortedRanges(container);
  assert.equal(list2.length, 3, JSON.stringify(list2));
  assertCovering(list2, "after two splits");
  const grandkids = list2.filter((r) => r.id !== list[0].id);
  assert.equal(grandkids.length, 2);
  for (const g of grandkids) assert.deepEqual(g.parents, ["0", child.id], `grandchild ${g.id} lists all ancestors`);
  assert.equal(grandkids[0].minInclusive, child.minInclusive);
  assert.equal(grandkids[1].maxExclusive, child.maxExclusive);
  assert.ok(grandkids.every((g) => g.id !== child.id && g.id !== "0"), "fresh ids again");
});

test("requests scoped to a retired range get 410 with substatus 1002", async () => {
  const { container, id: collId, rid } = await newContainer(database);
  await writeRange(container, 0, 5);
  assert.equal((await splitRange(srv, database.id, collId, "0")).status, 200);
  for (const scope of ["0", `${rid},0`]) {
    const feed = await rawFeed(collId, { "x-ms-documentdb-partitionkeyrangeid": scope });
    assert.equal(feed.status, 410, `change feed on retired range ${scope}: ${show(feed)}`);
    assert.equal(feed.headers["x-ms-substatus"], "1002", `substatus PartitionKeyRangeGone: ${show(feed)}`);
    const cont = await rawFeed(collId, { "x-ms-documentdb-partitionkeyrangeid": scope, "if-none-match": '"3"' });
    assert.equal(cont.status, 410, `change feed with a continuation on retired range ${scope}: ${show(cont)}`);
    assert.equal(cont.headers["x-ms-substatus"], "1002");
  }
  const q = await rawRequest(srv, {
    method: "POST",
    path: `/dbs/${database.id}/colls/${collId}/docs`,
    headers: {
      "content-type": "application/query+json",
      "x-ms-documentdb-isquery": "True",
      "x-ms-documentdb-query-enablecrosspartition": "True",
      "x-ms-documentdb-partitionkeyrangeid": "0",
    },
    body: { query: "SELECT * FROM c" },
  });
  assert.equal(q.status, 410, `query on the retired range: ${show(q)}`);
  assert.equal(q.headers["x-ms-substatus"], "1002");
  // An id that never existed is not "gone".
  const unknown = await rawFeed(collId, { "x-ms-documentdb-partitionkeyrangeid": "777" });
  assert.ok(unknown.status === 400 || unknown.status === 404, `unknown range id: ${show(unknown)}`);
});

test("after a split: point operations, queries and per-key feeds keep working through the SDK", async () => {
  const { container, id: collId } = await newContainer(database);
  const docs = await writeRange(container, 0, 30);
  // Let the SDK cache the single range first.
  assert.equal((await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll()).resources[0], 30);
  assert.equal((await splitRange(srv, database.id, collId, "0")).status, 200);

  for (const d of docs.slice(0, 10)) assert.equal((await container.item(d.id, d.pk).read()).resource.v, 1, `read ${keyOf(d)}`);
  await writeRange(container, 30, 35);
  assert.deepEqual((await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll()).resources, [35], "COUNT across the children");
  const all = (await container.items.query("SELECT VALUE c.id FROM c").fetchAll()).resources;
  assert.equal(all.length, 35);
  assert.equal(new Set(all).size, 35, "each document once");
  const ordered = (await container.items.query("SELECT VALUE c.id FROM c WHERE c.v = 1 ORDER BY c.id").fetchAll()).resources;
  assert.deepEqual(ordered, [...all].sort(), "ORDER BY across the children");
  const one = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning("pk-3") });
  assert.deepEqual((await drainChangeFeed(one)).items.map((d) => d.id), ["k3"]);
  const batch = await container.items.batch([{ operationType: "Create", resourceBody: { id: "kb", pk: "pk-3" } }], "pk-3");
  assert.equal(batch.code, 200, "a batch after the split");
});

test("the split admin request: errors for retired, unknown and malformed targets", async () => {
  const { id: collId } = await newContainer(database);
  assert.equal((await splitRange(srv, database.id, collId, "0")).status, 200);
  const again = await splitRange(srv, database.id, collId, "0");
  assert.equal(again.status, 400, `splitting a retired range: ${show(again)}`);
  const unknownRange = await splitRange(srv, database.id, collId, "999");
  assert.equal(unknownRange.status, 404, `unknown range: ${show(unknownRange)}`);
  const unknownColl = await splitRange(srv, database.id, "no-such-coll", "0");
  assert.equal(unknownColl.status, 404, `unknown container: ${show(unknownColl)}`);
  const unknownDb = await splitRange(srv, "no-such-db", collId, "0");
  assert.equal(unknownDb.status, 404, `unknown database: ${show(unknownDb)}`);
  for (const body of [{}, { db: database.id, coll: collId }, { db: database.id, coll: collId, range: 0 }]) {
    const r = await rawRequest(srv, { method: "POST", path: "/_admin/split", body });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${show(r)}`);
  }
  const get = await rawRequest(srv, { path: "/_admin/split" });
  assert.equal(get.status, 405, show(get));
  const unsigned = await rawRequest(srv, { method: "POST", path: "/_admin/split", body: { db: database.id, coll: collId, range: "1" }, sign: false });
  assert.equal(unsigned.status, 401, `the admin API needs the key: ${show(unsigned)}`);
  // A split survives a restart.
  const { container: c2, id: coll2 } = await newContainer(database);
  await writeRange(c2, 0, 3);
  assert.equal((await splitRange(srv, database.id, coll2, "0")).status, 200);
  await srv.restart();
  const list = await sortedRanges(c2);
  assert.equal(list.length, 2, "two ranges after the restart");
  for (const r of list) assert.deepEqual(r.parents, ["0"]);
  const gone = await rawFeed(coll2, { "x-ms-documentdb-partitionkeyrangeid": "0" });
  assert.equal(gone.status, 410, `still retired after the restart: ${show(gone)}`);
  assert.equal((await c2.item("k1", "pk-1").read()).resource.v, 1);
});

test("with several ranges: splitting one leaves the others alone, and the feed still sees everything once", async (t) => {
  const s2 = await startCosmolite(t, { memory: true, partitions: 2 });
  const c2 = s2.client();
  const { database: d2 } = await c2.databases.create({ id: "multi" });
  const { container } = await d2.containers.create({ id: "c", partitionKey: "/pk" });
  const first = await writeRange(container, 0, 24);
  const before = await sortedRanges(container);
  assert.deepEqual(before.map((r) => r.id), ["0", "1"]);
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 4 });
  const head = (await drainChangeFeed(it)).items;
  assertChanges(head, first, "two ranges before the split");

  const split = await splitRange(s2, "multi", "c", "1");
  assert.equal(split.status, 200, show(split));
  const after = await sortedRanges(container);
  assert.equal(after.length, 3, JSON.stringify(after));
  assertCovering(after, "after splitting range 1");
  assert.deepEqual(after[0], { ...after[0], id: "0", minInclusive: before[0].minInclusive, maxExclusive: before[0].maxExclusive });
  assert.deepEqual(after[0].parents, [], "the untouched range keeps its id and has no parents");
  for (const r of after.slice(1)) assert.deepEqual(r.parents, ["1"], `child ${r.id} names range 1`);

  const more = await writeRange(container, 24, 48);
  assertChanges((await drainChangeFeed(it)).items, more, "two ranges + a split, after the split");
  const fresh = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  assertChanges((await drainChangeFeed(fresh)).items, [...first, ...more], "from the beginning over three ranges");
  assert.deepEqual((await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll()).resources, [48]);
});

test("an AllVersionsAndDeletes iterator keeps every version exactly once across a split", async () => {
  const id = uid("avad");
  const { container } = await database.containers.create({ id, partitionKey: "/pk", changeFeedPolicy: { retentionDuration: 10 } });
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now(), changeFeedMode: ChangeFeedMode.AllVersionsAndDeletes, maxItemCount: 3 });
  assert.equal((await it.readNext()).statusCode, 304);
  await writeRange(container, 0, 6);
  const head = (await drainChangeFeed(it)).items;
  assert.equal((await splitRange(srv, database.id, id, "0")).status, 200);
  await writeRange(container, 0, 6, 2); // replaces
  await container.item("k0", "pk-0").delete();
  const tail = (await drainChangeFeed(it)).items;
  const got = [...head, ...tail].map((e) => `${e.metadata?.operationType}:${e.current?.id ?? e.metadata?.id}:${e.current?.v ?? "-"}`).sort();
  const want = [
    ...[0, 1, 2, 3, 4, 5].map((i) => `create:k${i}:1`),
    ...[0, 1, 2, 3, 4, 5].map((i) => `replace:k${i}:2`),
    "delete:k0:-",
  ].sort();
  assert.deepEqual(got, want, "every version once, before and after the split");
});

test("x-ms-documentdb-partitionkey scoped requests do not care about the split", async () => {
  const { container, id: collId } = await newContainer(database);
  await writeRange(container, 0, 4);
  assert.equal((await splitRange(srv, database.id, collId, "0")).status, 200);
  const r = await rawFeed(collId, pkHeaders("pk-2"));
  assert.equal(r.status, 200, show(r));
  assert.deepEqual(r.json.Documents.map((d) => d.id), ["k2"]);
});
