// The AllVersionsAndDeletes change feed (PROTOCOL.md section 8) through the
// official SDK: a container created with a ChangeFeedPolicy retention, an
// iterator in ChangeFeedMode.AllVersionsAndDeletes started "now" or from a
// continuation; every create, replace, upsert, patch and delete appears, in
// order, with metadata.operationType and the previous image.
import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { ChangeFeedMode, ChangeFeedPolicy, ChangeFeedRetentionTimeSpan, ChangeFeedStartFrom } from "@azure/cosmos";

import { adminRequest, drainChangeFeed, httpCode as code, pkHeaders, rawRequest, show, useDatabase, uid, userFields } from "./harness.mjs";

let srv, client, database;
useDatabase((e) => ({ srv, client, database } = e));

async function newContainer(extra = {}) {
  const { container, resource } = await database.containers.create({
    id: uid("coll"),
    partitionKey: "/pk",
    changeFeedPolicy: new ChangeFeedPolicy(ChangeFeedRetentionTimeSpan.fromMinutes(10)),
    ...extra,
  });
  return { container, resource };
}

function avad(container, startFrom, extra = {}) {
  return container.items.getChangeFeedIterator({ changeFeedStartFrom: startFrom, changeFeedMode: ChangeFeedMode.AllVersionsAndDeletes, ...extra });
}

/** An AVAD iterator from now, already past its first (idle) read. */
async function fromNow(container, pk) {
  const it = avad(container, pk === undefined ? ChangeFeedStartFrom.Now() : ChangeFeedStartFrom.Now(pk));
  const first = await it.readNext();
  assert.equal(first.statusCode, 304, `AllVersionsAndDeletes from now starts idle: ${JSON.stringify(first.result)}`);
  return it;
}

/** A short, comparable description of an AVAD entry. */
const describe = (e) => `${e.metadata?.operationType}:${e.metadata?.id ?? e.current?.id ?? e.previous?.id}`;

test("the container keeps its changeFeedPolicy", async () => {
  const { resource } = await newContainer();
  assert.deepEqual(resource.changeFeedPolicy, { retentionDuration: 10 }, JSON.stringify(resource));
});

test("creates, replaces, upserts, patches and deletes all appear, in order, with previous images", async () => {
  const { container } = await newContainer();
  await container.items.create({ id: "old", pk: "a", v: 0 }); // before "now": never shown
  const it = await fromNow(container);

  const { resource: c1 } = await container.items.create({ id: "x", pk: "a", v: 1 });
  const { resource: r2 } = await container.item("x", "a").replace({ id: "x", pk: "a", v: 2 });
  const { resource: u3 } = await container.items.upsert({ id: "x", pk: "a", v: 3 });
  const { resource: p4 } = await container.item("x", "a").patch([{ op: "incr", path: "/v", value: 1 }]);
  await container.item("x", "a").delete();
  const { resource: y1 } = await container.items.upsert({ id: "y", pk: "b", v: 1 }); // upsert that creates
  await container.item("old", "a").delete();

  const { items } = await drainChangeFeed(it);
  assert.deepEqual(
    items.map(describe),
    ["create:x", "replace:x", "replace:x", "replace:x", "delete:x", "create:y", "delete:old"],
    `every version, in order: ${JSON.stringify(items.map(describe))}`,
  );
  const [eCreate, eReplace, eUpsert, ePatch, eDelete, eCreateY, eDeleteOld] = items;

  assert.deepEqual(userFields(eCreate.current), userFields(c1), "create: current is the new document");
  assert.equal(eCreate.current._etag, c1._etag);
  assert.ok(!eCreate.previous, "create: no previous image");
  assert.deepEqual(userFields(eReplace.current), userFields(r2));
  assert.deepEqual(userFields(eReplace.previous), userFields(c1), "replace: previous is the version before");
  assert.deepEqual(userFields(eUpsert.current), userFields(u3));
  assert.deepEqual(userFields(eUpsert.previous), userFields(r2));
  assert.deepEqual(userFields(ePatch.current), userFields(p4), "patch shows as a replace with the patched document");
  assert.equal(ePatch.current.v, 4);
  assert.deepEqual(userFields(ePatch.previous), userFields(u3));
  assert.ok(!eDelete.current || Object.keys(eDelete.current).length === 0, `delete: no current image: ${JSON.stringify(eDelete)}`);
  assert.deepEqual(userFields(eDelete.previous ?? {}), userFields(p4), "delete: previous is the last version");
  assert.deepEqual(userFields(eCreateY.current), userFields(y1));
  assert.deepEqual(userFields(eDeleteOld.previous ?? {}), { id: "old", pk: "a", v: 0 }, "a document from before 'now' shows its delete");

  // Metadata.
  let lastLsn = 0;
  for (const e of items) {
    const m = e.metadata;
    assert.ok(m, `entry has metadata: ${JSON.stringify(e)}`);
    assert.ok(Number.isInteger(m.lsn) && m.lsn > lastLsn, `metadata.lsn ascends: ${lastLsn} then ${m.lsn}`);
    lastLsn = m.lsn;
    assert.ok(Number.isInteger(m.crts) && Math.abs(m.crts - Date.now() / 1000) < 300, `metadata.crts is epoch seconds: ${m.crts}`);
    assert.equal(m.timeToLiveExpired ?? false, false);
  }
  assert.equal(eReplace.metadata.previousImageLSN, eCreate.metadata.lsn, "previousImageLSN points at the version replaced");
  assert.equal(eUpsert.metadata.previousImageLSN, eReplace.metadata.lsn);
  assert.equal(ePatch.metadata.previousImageLSN, eUpsert.metadata.lsn);
  assert.equal(eDelete.metadata.previousImageLSN, ePatch.metadata.lsn);
  assert.equal(eDelete.metadata.id, "x", "a delete names the id");
  assert.deepEqual(eDelete.metadata.partitionKey, { pk: "a" }, "and the partition key");
  assert.equal(eDeleteOld.metadata.id, "old");

  // Versions do not collapse, and the iterator goes idle with a continuation.
  const idle = await it.readNext();
  assert.equal(idle.statusCode, 304);
  assert.ok(idle.continuationToken);
});

test("a continuation resumes in a new iterator; paging keeps every version exactly once", async () => {
  const { container } = await newContainer();
  const it = await fromNow(container);
  for (let i = 0; i < 4; i++) await container.items.upsert({ id: "hot", pk: "h", v: i });
  await container.items.create({ id: "cold", pk: "c", v: 0 });
  const page = await it.readNext();
  assert.equal(page.statusCode, 200);
  const token = page.continuationToken;
  const seen = [...page.result];
  const rest = await drainChangeFeed(it);
  seen.push(...rest.items);
  assert.deepEqual(seen.map((e) => `${describe(e)}:${e.current?.v}`), ["create:hot:0", "replace:hot:1", "replace:hot:2", "replace:hot:3", "create:cold:0"]);

  await container.items.upsert({ id: "hot", pk: "h", v: 9 });
  await container.item("cold", "c").delete();
  const resumed = avad(container, ChangeFeedStartFrom.Continuation(token));
  const again = (await drainChangeFeed(resumed)).items;
  const expectTail = [...seen.slice(page.result.length)].map(describe).concat(["replace:hot", "delete:cold"]);
  assert.deepEqual(again.map(describe), expectTail, "resumed from the first page's token");

  const small = await fromNow(container);
  for (let i = 0; i < 5; i++) await container.items.create({ id: `s${i}`, pk: "s" });
  const smallIt = avad(container, ChangeFeedStartFrom.Now(), { maxItemCount: 2 });
  assert.equal((await smallIt.readNext()).statusCode, 304);
  for (let i = 5; i < 10; i++) await container.items.create({ id: `s${i}`, pk: "s" });
  const pages = [];
  for (;;) {
    const r = await smallIt.readNext();
    if (r.statusCode === 304) break;
    pages.push(r.result);
    if (pages.length > 20) assert.fail("feed did not end");
  }
  assert.ok(pages.length >= 3, `maxItemCount 2 pages the feed (${pages.length} pages)`);
  assert.deepEqual(pages.flat().map(describe), [5, 6, 7, 8, 9].map((i) => `create:s${i}`));
  assert.equal((await drainChangeFeed(small)).items.length, 10);
});

test("per partition key and batch writes", async () => {
  const { container } = await newContainer();
  const itA = await fromNow(container, "a");
  await container.items.create({ id: "1", pk: "a" });
  await container.items.create({ id: "1", pk: "b" });
  const batch = await container.items.batch(
    [
      { operationType: "Create", resourceBody: { id: "2", pk: "a" } },
      { operationType: "Delete", id: "1" },
    ],
    "a",
  );
  assert.equal(batch.code, 200);
  const { items } = await drainChangeFeed(itA);
  assert.deepEqual(items.map(describe), ["create:1", "create:2", "delete:1"], "only partition key 'a'");
  assert.equal(items[1].metadata.lsn, items[2].metadata.lsn, "a batch's changes share one LSN");
  // A failed batch logs nothing.
  const failed = await container.items.batch(
    [
      { operationType: "Create", resourceBody: { id: "3", pk: "a" } },
      { operationType: "Read", id: "missing" },
    ],
    "a",
  );
  assert.equal(failed.code, 207);
  assert.equal((await itA.readNext()).statusCode, 304);
});

test("a TTL expiry appears as a delete with timeToLiveExpired", async () => {
  const { container } = await newContainer({ defaultTtl: 1 });
  const it = await fromNow(container);
  const { resource } = await container.items.create({ id: "brief", pk: "t", v: 1 });
  const deadline = Date.now() + 12_000;
  const got = [];
  while (Date.now() < deadline) {
    const r = await it.readNext();
    got.push(...r.result);
    if (got.some((e) => e.metadata?.operationType === "delete")) break;
    await sleep(250);
  }
  assert.deepEqual(got.map(describe), ["create:brief", "delete:brief"], `the expiry is logged within 12 s (after _ts ${resource._ts}): ${JSON.stringify(got)}`);
  const del = got[1];
  assert.equal(del.metadata.timeToLiveExpired, true, "marked as a TTL expiry");
  assert.equal(del.metadata.id, "brief");
  assert.deepEqual(userFields(del.previous ?? {}), { id: "brief", pk: "t", v: 1 });
});

test("refused: from the beginning or a time, and on containers without a retention policy", async () => {
  const { container } = await newContainer();
  await assert.rejects(drainChangeFeed(avad(container, ChangeFeedStartFrom.Beginning())), code(400), "from the beginning");
  const { container: plain, resource } = await database.containers.create({ id: uid("plain"), partitionKey: "/pk" });
  await assert.rejects(drainChangeFeed(avad(plain, ChangeFeedStartFrom.Now())), code(400), "no changeFeedPolicy");
  const r = await rawRequest(srv, {
    path: `/dbs/${database.id}/colls/${resource.id}/docs`,
    headers: { "a-im": "Full-Fidelity Feed", "x-ms-cosmos-changefeed-wire-format-version": "2021-09-15", "if-none-match": "*", ...pkHeaders("a") },
  });
  assert.equal(r.status, 400, `raw request on a container without retention: ${show(r)}`);
  // The LatestVersion feed of a retention container is unaffected.
  await container.items.create({ id: "lv", pk: "a", v: 1 });
  await container.items.upsert({ id: "lv", pk: "a", v: 2 });
  const lv = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  const { items } = await drainChangeFeed(lv);
  assert.deepEqual(items.map((d) => [d.id, d.v]), [["lv", 2]], "LatestVersion still collapses versions");
});

test("one item's create, replace, delete and TTL expiry in order, through a split and a merge", async () => {
  // defaultTtl -1: TTL on, items live until their own "ttl" says otherwise.
  const { container, resource } = await newContainer({ defaultTtl: -1 });
  const collId = resource.id;
  const it = await fromNow(container);
  const keys = Array.from({ length: 8 }, (_, i) => `k${i}`);
  const expected = new Map(keys.map((k) => [k, []]));
  const log = (k, op) => expected.get(k).push(op);

  for (const k of keys) {
    await container.items.create({ id: k, pk: k, v: 1 });
    log(k, "create");
  }
  // A split of the whole range, then writes on both children.
  const split = await adminRequest(srv, "POST", "split", { db: database.id, coll: collId, range: "0" });
  assert.equal(split.status, 200, show(split));
  for (const k of keys) {
    await container.item(k, k).replace({ id: k, pk: k, v: 2 });
    log(k, "replace");
  }
  const half = await drainChangeFeed(it); // read between the split and the merge
  // Merge the children back, then deletes and expiries.
  const merge = await adminRequest(srv, "POST", "merge", { db: database.id, coll: collId, ranges: split.json.children.map((c) => c.id) });
  assert.equal(merge.status, 200, show(merge));
  for (const k of keys.slice(0, 4)) {
    await container.item(k, k).delete();
    log(k, "delete");
  }
  for (const k of keys.slice(4)) {
    await container.items.upsert({ id: k, pk: k, v: 3, ttl: 1 });
    log(k, "replace");
    log(k, "delete"); // its expiry
  }
  const got = [...half.items];
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline && got.length < [...expected.values()].flat().length) {
    got.push(...(await drainChangeFeed(it)).items);
    await sleep(250);
  }
  const seen = new Map(keys.map((k) => [k, []]));
  for (const e of got) seen.get(e.metadata.id).push(e);
  for (const k of keys) {
    assert.deepEqual(seen.get(k).map((e) => e.metadata.operationType), expected.get(k), `${k}: each change once, in order: ${JSON.stringify(seen.get(k))}`);
    const lsns = seen.get(k).map((e) => e.metadata.lsn);
    assert.deepEqual(lsns, [...lsns].sort((a, b) => a - b), `${k}: LSNs ascend`);
    const last = seen.get(k).at(-1);
    assert.equal(last.metadata.timeToLiveExpired, k >= "k4", `${k}: a TTL expiry says so, a delete does not`);
  }
  // Beginning is still refused after the topology changed.
  await assert.rejects(drainChangeFeed(avad(container, ChangeFeedStartFrom.Beginning())), code(400), "from the beginning");
});
