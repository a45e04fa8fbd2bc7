// Several partition key ranges (--partitions 4): the range list, EPK routing
// as the SDK computes it, and whole-container change feeds across ranges.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { docKey as keyOf, drainChangeFeed, sdkEpk, uid, useDatabase } from "./harness.mjs";

const PARTITIONS = 4;
let srv, client, database;
useDatabase((e) => ({ srv, client, database } = e), { partitions: PARTITIONS });

async function newContainer() {
  const { container } = await database.containers.create({ id: uid("coll"), partitionKey: "/pk" });
  return container;
}


function assertOnce(items, expectedKeys, what) {
  const counts = new Map();
  for (const it of items) counts.set(keyOf(it), (counts.get(keyOf(it)) ?? 0) + 1);
  const dups = [...counts].filter(([, n]) => n > 1).map(([k]) => k);
  const missing = expectedKeys.filter((k) => !counts.has(k));
  const extra = [...counts.keys()].filter((k) => !expectedKeys.includes(k));
  assert.deepEqual({ dups, missing, extra }, { dups: [], missing: [], extra: [] }, what);
}

function pkValueOf(i) {
  // A mix of kinds so every encoding is routed.
  if (i % 10 === 7) return i; // numbers
  if (i === 3) return true;
  if (i === 5) return null;
  return `key-${i}`;
}

async function fill(container, n) {
  const docs = [];
  for (let i = 0; i < n; i++) {
    const d = { id: `doc${i}`, pk: pkValueOf(i), v: 1 };
    await container.items.create(d);
    docs.push(d);
  }
  return docs;
}

test("the SDK's EPK hash matches PROTOCOL.md vectors (referee sanity check)", async () => {
  assert.equal(await sdkEpk("redmond"), "22E342F38A486A088463DFF7838A5963");
  assert.equal(await sdkEpk(5), "19C08621B135968252FB34B4CF66F811");
  assert.equal(await sdkEpk(null), "378867E4430E67857ACE5C908374FE16");
  assert.equal(await sdkEpk(undefined), "11622DAA78F835834610ABE56EFF5CB5");
});

test(`readPartitionKeyRanges lists ${PARTITIONS} contiguous ranges covering "" to "FF"`, async () => {
  const container = await newContainer();
  const { resources } = await container.readPartitionKeyRanges().fetchAll();
  assert.equal(resources.length, PARTITIONS, JSON.stringify(resources));
  const ranges = [...resources].sort((x, y) => (x.minInclusive < y.minInclusive ? -1 : 1));
  assert.equal(ranges[0].minInclusive, "");
  assert.equal(ranges[ranges.length - 1].maxExclusive, "FF");
  for (let i = 1; i < ranges.length; i++) {
    assert.equal(ranges[i].minInclusive, ranges[i - 1].maxExclusive, "ranges are contiguous");
  }
  for (const r of ranges) {
    assert.ok(r.minInclusive < r.maxExclusive || r.maxExclusive === "FF", `non-empty range ${JSON.stringify(r)}`);
    assert.equal(typeof r.id, "string");
    assert.ok(Array.isArray(r.parents), "parents is an array");
    assert.equal(r.status ?? "online", "online");
  }
  assert.equal(new Set(ranges.map((r) => r.id)).size, PARTITIONS, "range ids are distinct");
  const feedRanges = await container.getFeedRanges();
  assert.equal(feedRanges.length, PARTITIONS, "getFeedRanges agrees");
});

test("every item lands in the range holding its EPK, and reads back by its key", async () => {
  const container = await newContainer();
  const docs = await fill(container, 40);
  const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();
  const feedRanges = await container.getFeedRanges();
  const byRange = new Map();
  for (const fr of feedRanges) {
    const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(fr) });
    const { items } = await drainChangeFeed(it);
    byRange.set(`${fr.minInclusive}-${fr.maxExclusive}`, items);
  }
  // Per-range feeds partition the container: union = all, disjoint.
  assertOnce([...byRange.values()].flat(), docs.map(keyOf), "per-range feeds");
  let used = 0;
  for (const [range, items] of byRange) {
    if (items.length) used++;
    const [min, max] = range.split("-");
    for (const it of items) {
      const epk = await sdkEpk(it.pk);
      assert.ok(
        epk >= min && (epk < max || max === "FF"),
        `item ${keyOf(it)} (EPK ${epk}) came from range [${min},${max}) that does not hold its EPK; ranges: ${JSON.stringify(ranges.map((r) => [r.id, r.minInclusive, r.maxExclusive]))}`,
      );
    }
  }
  assert.ok(used >= 2, `40 keys should spread over several of the ${PARTITIONS} ranges, used ${used}`);
  for (const d of docs) {
    const r = await container.item(d.id, d.pk).read();
    assert.equal(r.statusCode, 200, `read ${keyOf(d)}`);
  }
});

test("whole-container feed from the beginning returns every item exactly once; later writes follow", async () => {
  const container = await newContainer();
  const docs = await fill(container, 40);
  await container.items.upsert({ id: "doc1", pk: pkValueOf(1), v: 2 });
  await container.item("doc2", pkValueOf(2)).delete();
  const expected = docs.filter((d) => d.id !== "doc2").map(keyOf);

  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 6 });
  const { items, last } = await drainChangeFeed(it);
  assertOnce(items, expected, "beginning over all ranges");
  assert.equal(items.find((x) => x.id === "doc1").v, 2, "latest version");
  const lastLsn = new Map();
  for (const x of items) {
    const k = JSON.stringify(x.pk);
    if (lastLsn.has(k)) assert.ok(x._lsn > lastLsn.get(k), `_lsn ascends within pk ${k}`);
    lastLsn.set(k, x._lsn);
  }
  assert.equal(last.statusCode, 304);
  assert.equal((await it.readNext()).statusCode, 304, "idle across all ranges");

  const more = [];
  for (let i = 100; i < 110; i++) {
    const d = { id: `doc${i}`, pk: pkValueOf(i), v: 1 };
    await container.items.create(d);
    more.push(keyOf(d));
  }
  const { items: tail } = await drainChangeFeed(it);
  assertOnce(tail, more, "writes after drain, across ranges");

  // A continuation taken mid-way (composite over 4 ranges) resumes without loss or duplicates.
  const it2 = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 4 });
  const head = [];
  let token;
  for (let i = 0; i < 4; i++) {
    const r = await it2.readNext();
    head.push(...r.result);
    token = r.continuationToken;
  }
  const it3 = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(token), maxItemCount: 4 });
  const { items: rest } = await drainChangeFeed(it3);
  assertOnce([...head, ...rest], [...expected, ...more], "head + resumed composite continuation");

  // Now over all ranges.
  const itNow = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now() });
  assert.equal((await itNow.readNext()).statusCode, 304);
  await container.items.create({ id: "late", pk: "late-key", v: 1 });
  const { items: late } = await drainChangeFeed(itNow);
  assertOnce(late, [keyOf({ id: "late", pk: "late-key" })], "Now over all ranges");
});

test("per-partition-key feeds and the legacy API work with several ranges", async () => {
  const container = await newContainer();
  const docs = await fill(container, 30);
  for (const pk of [pkValueOf(0), pkValueOf(7), pkValueOf(3), pkValueOf(5)]) {
    const want = docs.filter((d) => d.pk === pk).map(keyOf);
    const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(pk) });
    const { items } = await drainChangeFeed(it);
    assertOnce(items, want, `Beginning(${JSON.stringify(pk)})`);
    const legacy = container.items.changeFeed(pk, { startFromBeginning: true });
    const got = [];
    for (let pages = 0; legacy.hasMoreResults; pages++) {
      if (pages > 50) assert.fail("legacy feed did not end");
      got.push(...(await legacy.fetchNext()).result);
    }
    assertOnce(got, want, `legacy changeFeed(${JSON.stringify(pk)})`);
  }
});
