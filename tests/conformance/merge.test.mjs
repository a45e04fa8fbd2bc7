// Partition merges (POST /_admin/merge) seen through the official SDK: two
// adjacent ranges become one whose "parents" name both; requests scoped to
// a merged-away range get 410/1002; the SDK's change-feed iterators (whole
// container, from a continuation, and scoped to a parent's feed range) go on
// through the merge without loss or repeat, because a parent's continuation
// stays valid on the merged range when scoped by EPK (x-ms-start-epk /
// x-ms-end-epk). Splits and merges in any order under concurrent writes keep
// every acknowledged write and deliver each change once per scope.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { adminRequest, assertChanges, assertCovering, docKey as keyOf, drainChangeFeed, newContainer, rawRequest, sdkEpk, show, sortedRanges, splitRange, useDatabase, writeRange } from "./harness.mjs";

const PARTITIONS = 4;
let srv, client, database;
useDatabase((e) => ({ srv, client, database } = e), { partitions: PARTITIONS });

function mergeRanges(s, db, coll, ranges) {
  return adminRequest(s, "POST", "merge", { db, coll, ranges });
}

const inSpan = (epk, min, max) => epk >= min && (epk < max || max === "FF");

function rawFeed(collId, headers) {
  return rawRequest(srv, { path: `/dbs/${database.id}/colls/${collId}/docs`, headers: { "a-im": "Incremental Feed", "x-ms-max-item-count": "1000", ...headers } });
}

test("a running whole-container change-feed iterator sees every change exactly once across a merge", async () => {
  const { container, id: collId } = await newContainer(database);
  const first = await writeRange(container, 0, 40);
  const drained = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 7 });
  const head = await drainChangeFeed(drained);
  assertChanges(head.items, first, "before the merge");
  const token = head.last.continuationToken;
  const halfway = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 4 });
  const halfItems = [];
  for (let i = 0; i < 3; i++) halfItems.push(...(await halfway.readNext()).result);

  const merge = await mergeRanges(srv, database.id, collId, ["1", "2"]);
  assert.equal(merge.status, 200, show(merge));
  assert.deepEqual(merge.json?.parents, ["1", "2"], merge.text);
  assert.equal(merge.json?.merged?.id, "4", `a fresh id after 0..3: ${merge.text}`);

  const more = await writeRange(container, 40, 60);
  const updated = [
    { id: "k1", pk: "pk-1", v: 2 },
    { id: "k17", pk: "pk-17", v: 2 },
    { id: "k45", pk: "pk-45", v: 2 },
  ];
  for (const d of updated) await container.items.upsert(d);
  const latest = new Map([...first, ...more, ...updated].map((d) => [keyOf(d), d]));
  const afterMerge = [...more.filter((d) => !updated.some((u) => keyOf(u) === keyOf(d))), ...updated];

  assertChanges((await drainChangeFeed(drained)).items, afterMerge, "the drained iterator, after the merge");
  assert.equal((await drained.readNext()).statusCode, 304, "idle again after the merge");
  const rest = await drainChangeFeed(halfway);
  assertChanges([...halfItems, ...rest.items], [...latest.values()], "the half-read iterator: backlog + new writes");
  const resumed = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(token) });
  assertChanges((await drainChangeFeed(resumed)).items, afterMerge, "a pre-merge continuation token in a new iterator");
  const fresh = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 6 });
  const all = (await drainChangeFeed(fresh)).items;
  assertChanges(all, [...latest.values()], "a new iterator from the beginning after the merge");
  assert.equal(all.length, latest.size, "each document once at its latest version");
});

test("an iterator scoped to one parent's feed range goes on after the merge with that parent's changes only", async () => {
  const { container, id: collId } = await newContainer(database);
  const feedRanges = [...(await container.getFeedRanges())].sort((a, b) => (a.minInclusive < b.minInclusive ? -1 : 1));
  assert.equal(feedRanges.length, PARTITIONS);
  const first = await writeRange(container, 0, 40);
  const scoped = [];
  for (const fr of feedRanges.slice(1, 3)) {
    const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(fr), maxItemCount: 3 });
    scoped.push({ fr, it, items: (await drainChangeFeed(it)).items });
  }
  const before = scoped.map((s) => s.items.length);
  assert.ok(before.every((n) => n > 0), `40 keys reach both parents: ${before}`);

  assert.equal((await mergeRanges(srv, database.id, collId, ["2", "1"])).status, 200, "either order");
  const more = await writeRange(container, 40, 80);
  const epks = new Map();
  for (const d of [...first, ...more]) epks.set(keyOf(d), await sdkEpk(d.pk));
  for (const s of scoped) {
    const { minInclusive: min, maxExclusive: max } = s.fr;
    const tail = (await drainChangeFeed(s.it)).items;
    const want = more.filter((d) => inSpan(epks.get(keyOf(d)), min, max));
    assert.ok(want.length > 0, `some new keys in [${min}, ${max})`);
    assertChanges(tail, want, `the iterator scoped to [${min}, ${max}) after the merge`);
    const all = first.filter((d) => inSpan(epks.get(keyOf(d)), min, max));
    assertChanges([...s.items, ...tail], [...all, ...want], `[${min}, ${max}) before + after`);
  }
});

test("pkranges after a merge: one range spans both parents and names them; Azure's fields; etag changes", async () => {
  const { container, id: collId } = await newContainer(database);
  const pkrPath = `/dbs/${database.id}/colls/${collId}/pkranges`;
  const before = await rawRequest(srv, { path: pkrPath });
  assert.equal(before.status, 200, show(before));
  const old = [...before.json.PartitionKeyRanges].sort((a, b) => (a.minInclusive < b.minInclusive ? -1 : 1));
  for (const r of old) {
    for (const f of ["_rid", "id", "_etag", "minInclusive", "maxExclusive", "ridPrefix", "_self", "throughputFraction", "status", "parents", "lsn", "_ts", "_lsn"])
      assert.ok(f in r, `range ${r.id} has ${f}: ${JSON.stringify(r)}`);
    assert.equal(r.status, "online");
    assert.equal(r.throughputFraction, 1 / PARTITIONS);
    assert.equal(r.ridPrefix, Number(r.id));
    assert.equal(typeof r.lsn, "number");
  }

  // Split 0 first, then merge its right child with range 1: a merge over mixed ancestry.
  const split = await splitRange(srv, database.id, collId, "0");
  assert.equal(split.status, 200, show(split));
  const [, right] = split.json.children;
  const merge = await mergeRanges(srv, database.id, collId, [right.id, "1"]);
  assert.equal(merge.status, 200, show(merge));
  const list = await sortedRanges(container);
  assertCovering(list, "after split + merge");
  assert.equal(list.length, PARTITIONS, "4 ranges: split added one, merge took one");
  const merged = list.find((r) => r.id === merge.json.merged.id);
  assert.ok(merged, `the merged range is listed: ${JSON.stringify(list)}`);
  assert.deepEqual(merged.parents, ["0", right.id, "1"], "every ancestor, both parents last");
  assert.equal(merged.minInclusive, right.minInclusive);
  assert.equal(merged.maxExclusive, old[1].maxExclusive);
  assert.ok(list.every((r) => r.id !== "1" && r.id !== right.id), "the parents are gone from the list");
  assert.ok(list.every((r) => r.throughputFraction === 1 / list.length), "fractions add up to 1");
  const afterList = await rawRequest(srv, { path: pkrPath, headers: { "if-none-match": before.headers.etag, "a-im": "Incremental Feed" } });
  assert.equal(afterList.status, 200, show(afterList));
  assert.notEqual(afterList.headers.etag, before.headers.etag, "the list's etag changed");

  // A merge survives a restart.
  await srv.restart();
  const again = await sortedRanges(container);
  assert.deepEqual(again.map((r) => [r.id, r.minInclusive, r.maxExclusive, r.parents]), list.map((r) => [r.id, r.minInclusive, r.maxExclusive, r.parents]), "same ranges after a restart");
  const gone = await rawFeed(collId, { "x-ms-documentdb-partitionkeyrangeid": "1" });
  assert.equal(gone.status, 410, `still merged away after the restart: ${show(gone)}`);
});

test("requests scoped to a merged-away range get 410/1002; a parent's continuation scoped by EPK works on the merged range", async () => {
  const { container, id: collId, rid } = await newContainer(database);
  const docs = await writeRange(container, 0, 40);
  const old = await sortedRanges(container);
  const parentFeeds = [];
  for (const r of old.slice(1, 3)) {
    const res = await rawFeed(collId, { "x-ms-documentdb-partitionkeyrangeid": r.id });
    assert.equal(res.status, 200, show(res));
    parentFeeds.push({ r, etag: res.headers.etag, docs: res.json.Documents });
  }
  assert.equal((await mergeRanges(srv, database.id, collId, ["1", "2"])).status, 200);
  for (const scope of ["1", "2", `${rid},1`]) {
    const feed = await rawFeed(collId, { "x-ms-documentdb-partitionkeyrangeid": scope });
    assert.equal(feed.status, 410, `change feed on merged-away range ${scope}: ${show(feed)}`);
    assert.equal(feed.headers["x-ms-substatus"], "1002", `PartitionKeyRangeGone: ${show(feed)}`);
  }
  const q = await rawRequest(srv, {
    method: "POST",
    path: `/dbs/${database.id}/colls/${collId}/docs`,
    headers: {
      "content-type": "application/query+json",
      "x-ms-documentdb-isquery": "True",
      "x-ms-documentdb-query-enablecrosspartition": "True",
      "x-ms-documentdb-partitionkeyrangeid": "2",
    },
    body: { query: "SELECT * FROM c" },
  });
  assert.equal(q.status, 410, `query on a merged-away range: ${show(q)}`);
  assert.equal(q.headers["x-ms-substatus"], "1002");

  const more = await writeRange(container, 40, 80);
  const epks = new Map();
  for (const d of [...docs, ...more]) epks.set(keyOf(d), await sdkEpk(d.pk));
  for (const p of parentFeeds) {
    const headers = { "x-ms-documentdb-partitionkeyrangeid": "4", "if-none-match": p.etag, "x-ms-end-epk": p.r.maxExclusive };
    if (p.r.minInclusive) headers["x-ms-start-epk"] = p.r.minInclusive;
    const res = await rawFeed(collId, headers);
    assert.equal(res.status, 200, show(res));
    const want = more.filter((d) => inSpan(epks.get(keyOf(d)), p.r.minInclusive, p.r.maxExclusive));
    assertChanges(res.json.Documents, want, `parent ${p.r.id}'s continuation on the merged range`);
  }
  // Point operations and queries keep working.
  for (const d of docs.slice(0, 10)) assert.equal((await container.item(d.id, d.pk).read()).resource.v, 1);
  assert.deepEqual((await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll()).resources, [80]);
});

test("the merge admin request: clear errors for bad targets and bodies, and the key is needed", async () => {
  const { id: collId } = await newContainer(database);
  const cases = [
    [["0", "2"], 400, "not adjacent"],
    [["1", "1"], 400, "itself"],
    [["1", "99"], 404, "no partition key range '99'"],
  ];
  for (const [pair, status, text] of cases) {
    const r = await mergeRanges(srv, database.id, collId, pair);
    assert.equal(r.status, status, `${JSON.stringify(pair)}: ${show(r)}`);
    assert.ok(r.text.includes(text), `${JSON.stringify(pair)} says why: ${r.text}`);
  }
  assert.equal((await mergeRanges(srv, database.id, collId, ["0", "1"])).status, 200);
  const retired = await mergeRanges(srv, database.id, collId, ["1", "2"]);
  assert.equal(retired.status, 400, `a merged-away range: ${show(retired)}`);
  assert.equal((await mergeRanges(srv, database.id, "no-such-coll", ["2", "3"])).status, 404);
  assert.equal((await mergeRanges(srv, "no-such-db", collId, ["2", "3"])).status, 404);
  for (const body of [{}, { db: database.id, coll: collId }, { db: database.id, coll: collId, ranges: ["2"] }, { db: database.id, coll: collId, ranges: [2, 3] }, { db: database.id, coll: collId, ranges: "2,3" }]) {
    const r = await rawRequest(srv, { method: "POST", path: "/_admin/merge", body });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${show(r)}`);
  }
  assert.equal((await rawRequest(srv, { path: "/_admin/merge" })).status, 405);
  const unsigned = await rawRequest(srv, { method: "POST", path: "/_admin/merge", body: { db: database.id, coll: collId, ranges: ["2", "3"] }, sign: false });
  assert.equal(unsigned.status, 401, `the admin API needs the key: ${show(unsigned)}`);
});

/** The first pair of adjacent online ranges after `skip` pairs, as [leftId, rightId]. */
async function adjacentPair(container, skip = 0) {
  const list = await sortedRanges(container);
  const i = Math.min(skip, list.length - 2);
  return [list[i].id, list[i + 1].id];
}

test("splits and merges mid-load in any order keep every acknowledged write and deliver each change once per scope", async () => {
  const { container, id: collId } = await newContainer(database);
  const feedRanges = [...(await container.getFeedRanges())];
  const whole = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(), maxItemCount: 5 });
  const perRange = feedRanges.map((fr) => container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(fr), maxItemCount: 5 }));
  const wholeItems = [];
  const rangeItems = perRange.map(() => []);
  const acked = new Map(); // key -> latest acknowledged doc
  let stop = false;

  // Four writers, each owning its keys, so a key's versions only go up; they write until
  // every split and merge is done (bounded by 1000 rounds).
  const writer = async (w) => {
    for (let round = 1; !stop && round <= 1000; round++) {
      for (let j = 0; j < 5; j++) {
        const d = { id: `w${w}-${j}`, pk: `p${w}-${j}`, v: round };
        await container.items.upsert(d);
        acked.set(keyOf(d), d);
      }
    }
  };
  // While writes go on a feed may never report 304: read pages, not until idle.
  const readSome = async (it, into, pages) => {
    for (let i = 0; i < pages; i++) {
      const r = await it.readNext();
      if (r.statusCode === 200) into.push(...r.result);
    }
  };
  const reader = async () => {
    while (!stop) {
      await readSome(whole, wholeItems, 3);
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  const writers = [0, 1, 2, 3].map(writer);
  const reading = reader();
  const ops = [
    ["split", "0"],
    ["merge", 0],
    ["merge", 1],
    ["split", "3"],
    ["merge", 2],
    ["merge", 0],
    ["split", null],
    ["merge", 1],
  ];
  const done = [];
  for (const [kind, arg] of ops) {
    await new Promise((r) => setTimeout(r, 30));
    let res;
    if (kind === "split") {
      const target = arg ?? (await sortedRanges(container))[0].id;
      res = await splitRange(srv, database.id, collId, target);
    } else {
      res = await mergeRanges(srv, database.id, collId, await adjacentPair(container, arg));
    }
    assert.equal(res.status, 200, `${kind} ${arg}: ${show(res)}`);
    done.push(kind);
    for (let i = 0; i < perRange.length; i++) await readSome(perRange[i], rangeItems[i], 2);
  }
  stop = true;
  await Promise.all(writers);
  await reading;
  wholeItems.push(...(await drainChangeFeed(whole)).items);
  for (let i = 0; i < perRange.length; i++) rangeItems[i].push(...(await drainChangeFeed(perRange[i])).items);

  assert.equal(done.length, ops.length);
  assert.ok(acked.size === 20, `every key was written: ${acked.size}`);
  assertCovering(await sortedRanges(container), "after the load");
  assertChanges(wholeItems, [...acked.values()], "the whole-container iterator read during the load");
  // The scoped iterators partition the container: together each change once.
  assertChanges(rangeItems.flat(), [...acked.values()], "the per-feed-range iterators together");
  for (let i = 0; i < feedRanges.length; i++) {
    const { minInclusive: min, maxExclusive: max } = feedRanges[i];
    for (const d of rangeItems[i]) assert.ok(inSpan(await sdkEpk(d.pk), min, max), `${keyOf(d)} only in its scope [${min}, ${max})`);
  }
  // Every acknowledged write reads back at its version.
  for (const d of acked.values()) assert.equal((await container.item(d.id, d.pk).read()).resource.v, d.v, `read ${keyOf(d)}`);
  const fresh = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  const all = (await drainChangeFeed(fresh)).items;
  assertChanges(all, [...acked.values()], "a new iterator after the load");
  assert.equal(all.length, acked.size);
});
