// Change feed (LatestVersion) in every start mode through the official SDK:
// getChangeFeedIterator with Beginning / Now / Time / Continuation, whole
// container and per partition key, and the legacy items.changeFeed API.
import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { docKey as keyOf, drainChangeFeed, useDatabase, uid } from "./harness.mjs";

let srv, client, database;
useDatabase((e) => ({ srv, client, database } = e));

async function newContainer() {
  const { container } = await database.containers.create({ id: uid("coll"), partitionKey: "/pk" });
  return container;
}


/**
 * Checks the feed contract on `items`: each (pk,id) at most once, every item
 * has an integer _lsn, and _lsn strictly ascends within each partition key.
 * Returns a Map key -> item.
 */
function checkFeed(items) {
  const seen = new Map();
  const lastLsn = new Map();
  for (const it of items) {
    const k = keyOf(it);
    assert.ok(!seen.has(k), `item ${k} appears twice in the change feed`);
    seen.set(k, it);
    assert.ok(Number.isInteger(it._lsn) && it._lsn > 0, `item ${k} has no integer _lsn: ${JSON.stringify(it)}`);
    const pk = JSON.stringify(it.pk);
    if (lastLsn.has(pk)) {
      assert.ok(it._lsn > lastLsn.get(pk), `_lsn must ascend within pk ${pk}: ${lastLsn.get(pk)} then ${it._lsn}`);
    }
    lastLsn.set(pk, it._lsn);
  }
  return seen;
}

/** Asserts that the feed holds exactly `expected` ({pk,id,v} list) at those versions. */
function assertExactly(items, expected, what) {
  const seen = checkFeed(items);
  const want = new Map(expected.map((e) => [keyOf(e), e]));
  const missing = [...want.keys()].filter((k) => !seen.has(k));
  const extra = [...seen.keys()].filter((k) => !want.has(k));
  assert.deepEqual({ missing, extra }, { missing: [], extra: [] }, `${what}: feed items differ`);
  for (const [k, e] of want) {
    assert.equal(seen.get(k).v, e.v, `${what}: ${k} must be at its latest version`);
  }
}

async function writeBasicHistory(container) {
  const live = new Map();
  const put = async (doc) => {
    await container.items.upsert(doc);
    live.set(keyOf(doc), doc);
  };
  for (const pk of ["a", "b", "c"]) {
    for (let i = 0; i < 5; i++) await put({ id: `i${i}`, pk, v: 1 });
  }
  await put({ id: "i1", pk: "a", v: 2 });
  await put({ id: "i1", pk: "a", v: 3 });
  await put({ id: "i2", pk: "b", v: 2 });
  await container.item("i3", "c").delete();
  live.delete(keyOf({ id: "i3", pk: "c" }));
  await container.item("i0", "c").delete();
  await put({ id: "i0", pk: "c", v: 9 }); // deleted then recreated: appears once, new version
  return live;
}

test("Beginning, whole container: each live item once at its latest version, ordered by _lsn, no deletes", async () => {
  const container = await newContainer();
  const live = await writeBasicHistory(container);
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  const { items, last } = await drainChangeFeed(it);
  assertExactly(items, [...live.values()], "from beginning");
  assert.equal(last.statusCode, 304);
  assert.ok(last.continuationToken, "a 304 still carries a continuation token");
  // Items are the current documents plus _lsn.
  for (const item of items) {
    const { resource } = await container.item(item.id, item.pk).read();
    const { _lsn, ...rest } = item;
    assert.deepEqual(rest, resource, `feed item ${keyOf(item)} equals the stored document`);
  }
});

test("after draining: idle 304 keeps the continuation, new writes show up once, deletes never", async () => {
  const container = await newContainer();
  await writeBasicHistory(container);
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  await drainChangeFeed(it);

  const idle1 = await it.readNext();
  const idle2 = await it.readNext();
  assert.equal(idle1.statusCode, 304, "an idle feed reports 304");
  assert.equal(idle2.statusCode, 304);
  assert.equal(idle1.result.length, 0);
  assert.equal(idle1.continuationToken, idle2.continuationToken, "idle polls keep the same continuation");
  const tokenBefore = idle2.continuationToken;

  await container.items.create({ id: "new", pk: "a", v: 1 });
  await container.items.upsert({ id: "i0", pk: "b", v: 7 });
  await container.items.upsert({ id: "i0", pk: "b", v: 8 }); // collapses with the previous
  const { items } = await drainChangeFeed(it);
  assertExactly(items, [{ id: "new", pk: "a", v: 1 }, { id: "i0", pk: "b", v: 8 }], "after drain");

  // The token saved while idle resumes at the same place in a new iterator.
  const resumed = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(tokenBefore) });
  const again = await drainChangeFeed(resumed);
  assertExactly(again.items, [{ id: "new", pk: "a", v: 1 }, { id: "i0", pk: "b", v: 8 }], "resumed from idle token");

  // A delete advances nothing visible.
  await container.item("i4", "a").delete();
  const afterDelete = await it.readNext();
  assert.equal(afterDelete.statusCode, 304, "a delete never appears in the LatestVersion feed");
  // Writes after a delete still show up.
  await container.items.create({ id: "after-delete", pk: "a", v: 1 });
  const { items: tail } = await drainChangeFeed(it);
  assertExactly(tail, [{ id: "after-delete", pk: "a", v: 1 }], "after delete");
});

test("Now: nothing from before, every change after", async () => {
  const container = await newContainer();
  await container.items.create({ id: "old", pk: "a", v: 1 });
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now() });
  const first = await it.readNext();
  assert.equal(first.statusCode, 304, "Now on an idle container starts with 304");
  assert.equal(first.result.length, 0);
  await container.items.create({ id: "fresh", pk: "b", v: 1 });
  await container.items.upsert({ id: "old", pk: "a", v: 2 });
  const { items } = await drainChangeFeed(it);
  assertExactly(items, [{ id: "fresh", pk: "b", v: 1 }, { id: "old", pk: "a", v: 2 }], "from now");
});

test("Time(date): only items changed at or after the time", async () => {
  const container = await newContainer();
  for (let i = 0; i < 3; i++) await container.items.create({ id: `before${i}`, pk: "a", v: 1 });
  // _ts has one-second resolution and If-Modified-Since too: move to a fresh second.
  await sleep(1000 - (Date.now() % 1000) + 1100);
  const t = new Date();
  for (let i = 0; i < 3; i++) await container.items.create({ id: `after${i}`, pk: i === 0 ? "a" : "b", v: 1 });
  await container.items.upsert({ id: "before1", pk: "a", v: 2 }); // touched after t

  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Time(t) });
  const { items } = await drainChangeFeed(it);
  assertExactly(
    items,
    [
      { id: "after0", pk: "a", v: 1 },
      { id: "after1", pk: "b", v: 1 },
      { id: "after2", pk: "b", v: 1 },
      { id: "before1", pk: "a", v: 2 },
    ],
    "from time",
  );
  // Later writes continue to flow on the same iterator.
  await container.items.create({ id: "later", pk: "c", v: 1 });
  const { items: more } = await drainChangeFeed(it);
  assertExactly(more, [{ id: "later", pk: "c", v: 1 }], "time iterator after drain");

  const past = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Time(new Date("2000-01-01T00:00:00Z")) });
  const all = await drainChangeFeed(past);
  assert.equal(all.items.length, 7, "a time in the past gives everything");
});

test("Continuation: a paged read resumes in a new iterator without loss or duplicates", async () => {
  const container = await newContainer();
  const docs = [];
  for (let i = 0; i < 12; i++) {
    const d = { id: `d${i}`, pk: ["a", "b", "c"][i % 3], v: 1 };
    await container.items.create(d);
    docs.push(d);
  }
  const it = container.items.getChangeFeedIterator({
    changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
    maxItemCount: 5,
  });
  const page1 = await it.readNext();
  assert.equal(page1.statusCode, 200);
  assert.ok(page1.result.length > 0 && page1.result.length <= 5, `page size respects maxItemCount: ${page1.result.length}`);
  const token = page1.continuationToken;
  assert.equal(typeof token, "string");

  const rest = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(token), maxItemCount: 5 });
  const { items: restItems, pages } = await drainChangeFeed(rest);
  assert.ok(pages >= 2, "the remainder needs more than one page of 5");
  assertExactly([...page1.result, ...restItems], docs, "page 1 + resumed");

  // The original iterator reaches the same remainder.
  const { items: origRest } = await drainChangeFeed(it);
  assert.deepEqual(origRest.map(keyOf), restItems.map(keyOf));

  // Feed pages honour maxItemCount throughout.
  const small = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 1 });
  let n = 0;
  for (;;) {
    const r = await small.readNext();
    if (r.statusCode === 304) break;
    assert.equal(r.result.length, 1, "maxItemCount 1 gives one item per page (one write per LSN)");
    if (++n > 50) assert.fail("feed did not end");
  }
  assert.equal(n, 12);
});

test("per partition key: Beginning(pk), Now(pk), Time(pk), Continuation", async () => {
  const container = await newContainer();
  for (let i = 0; i < 4; i++) {
    await container.items.create({ id: `s${i}`, pk: "a", v: 1 });
    await container.items.create({ id: `s${i}`, pk: "b", v: 1 });
    await container.items.create({ id: `s${i}`, pk: 7, v: 1 });
  }
  await container.items.upsert({ id: "s1", pk: "a", v: 2 });

  const itA = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning("a") });
  const { items: a } = await drainChangeFeed(itA);
  assertExactly(
    a,
    [0, 1, 2, 3].map((i) => ({ id: `s${i}`, pk: "a", v: i === 1 ? 2 : 1 })),
    "Beginning('a')",
  );

  const it7 = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(7) });
  const { items: seven } = await drainChangeFeed(it7);
  assertExactly(seven, [0, 1, 2, 3].map((i) => ({ id: `s${i}`, pk: 7, v: 1 })), "Beginning(7)");

  const itNowB = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now("b") });
  assert.equal((await itNowB.readNext()).statusCode, 304);

  // Writes to several keys; each per-key feed sees only its own.
  await container.items.create({ id: "n1", pk: "a", v: 1 });
  await container.items.create({ id: "n1", pk: "b", v: 1 });
  await container.items.upsert({ id: "s0", pk: "b", v: 5 });
  const pageA = await itA.readNext();
  assertExactly(pageA.result, [{ id: "n1", pk: "a", v: 1 }], "Beginning('a') after new writes");
  const tokenA = pageA.continuationToken;
  assert.equal((await itA.readNext()).statusCode, 304);
  const { items: b } = await drainChangeFeed(itNowB);
  assertExactly(b, [{ id: "n1", pk: "b", v: 1 }, { id: "s0", pk: "b", v: 5 }], "Now('b')");

  // Continuation of a per-key iterator stays scoped to its key.
  await container.items.create({ id: "n2", pk: "a", v: 1 });
  await container.items.create({ id: "n2", pk: "b", v: 1 });
  const resumed = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(tokenA) });
  const { items: ra } = await drainChangeFeed(resumed);
  assertExactly(ra, [{ id: "n2", pk: "a", v: 1 }], "Continuation(per-key token)");

  await sleep(1000 - (Date.now() % 1000) + 1100);
  const t = new Date();
  await container.items.create({ id: "t1", pk: "a", v: 1 });
  await container.items.create({ id: "t1", pk: "b", v: 1 });
  const itTime = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Time(t, "a") });
  const { items: ta } = await drainChangeFeed(itTime);
  assertExactly(ta, [{ id: "t1", pk: "a", v: 1 }], "Time(t, 'a')");

  const nullIt = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(null) });
  assert.equal((await nullIt.readNext()).statusCode, 304, "an empty logical partition has no changes");
  await container.items.create({ id: "z", pk: null, v: 1 });
  const { items: nz } = await drainChangeFeed(nullIt);
  assertExactly(nz, [{ id: "z", pk: null, v: 1 }], "Beginning(null)");
});

test("legacy items.changeFeed(pk, options)", async () => {
  const container = await newContainer();
  for (let i = 0; i < 5; i++) {
    await container.items.create({ id: `l${i}`, pk: "a", v: 1 });
    await container.items.create({ id: `l${i}`, pk: "b", v: 1 });
  }
  await container.items.upsert({ id: "l2", pk: "a", v: 2 });
  await container.item("l3", "a").delete();

  const it = container.items.changeFeed("a", { startFromBeginning: true });
  const items = [];
  let lastEtag;
  for (let pages = 0; it.hasMoreResults; pages++) {
    if (pages > 50) assert.fail("legacy feed did not end with 304");
    const r = await it.fetchNext();
    items.push(...r.result);
    if (r.statusCode === 304) {
      assert.ok(r.etag, "legacy 304 carries the etag");
      lastEtag = r.etag;
    }
  }
  assertExactly(items, [{ id: "l0", pk: "a", v: 1 }, { id: "l1", pk: "a", v: 1 }, { id: "l2", pk: "a", v: 2 }, { id: "l4", pk: "a", v: 1 }], "legacy from beginning");

  await container.items.create({ id: "l9", pk: "a", v: 1 });
  await container.items.create({ id: "l9", pk: "b", v: 1 });
  // Resume with the raw etag as the legacy continuation.
  const resumed = container.items.changeFeed("a", { continuation: lastEtag });
  const r1 = await resumed.fetchNext();
  assert.equal(r1.statusCode, 200);
  assertExactly(r1.result, [{ id: "l9", pk: "a", v: 1 }], "legacy continuation");
  const r2 = await resumed.fetchNext();
  assert.equal(r2.statusCode, 304);

  // Default start is "now".
  const fromNow = container.items.changeFeed("b");
  assert.equal((await fromNow.fetchNext()).statusCode, 304);
  await container.items.upsert({ id: "l0", pk: "b", v: 3 });
  const r3 = await fromNow.fetchNext();
  assertExactly(r3.result, [{ id: "l0", pk: "b", v: 3 }], "legacy from now");

  // startTime
  await sleep(1000 - (Date.now() % 1000) + 1100);
  const t = new Date();
  await container.items.create({ id: "lt", pk: "b", v: 1 });
  const byTime = container.items.changeFeed("b", { startTime: t });
  const r4 = await byTime.fetchNext();
  assertExactly(r4.result, [{ id: "lt", pk: "b", v: 1 }], "legacy startTime");
});

test("a busy feed read concurrently with writes never duplicates or loses items", async () => {
  const container = await newContainer();
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 7 });
  const writer = (async () => {
    for (let i = 0; i < 60; i++) await container.items.create({ id: `w${i}`, pk: `k${i % 6}`, v: 1 });
  })();
  const got = [];
  let done = false;
  writer.then(() => {
    done = true;
  });
  const deadline = Date.now() + 60_000;
  while (!done && Date.now() < deadline) {
    const r = await it.readNext();
    got.push(...r.result);
    if (r.statusCode === 304) await sleep(10);
  }
  await writer;
  const { items: tail } = await drainChangeFeed(it);
  got.push(...tail);
  assertExactly(got, Array.from({ length: 60 }, (_, i) => ({ id: `w${i}`, pk: `k${i % 6}`, v: 1 })), "concurrent");
});
