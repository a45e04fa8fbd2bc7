// Time to live through the official SDK: container defaultTtl (absent, -1,
// N seconds) and per-item ttl (-1, N); expired items disappear from point
// reads, queries and the change feed, and behave as missing for writes.
// Every scenario is created up front and checked at an absolute time derived
// from the document's own _ts (one-second resolution), so the file waits a
// few seconds once instead of once per test.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { drainChangeFeed, httpCode as code, startWithDatabase, uid } from "./harness.mjs";

let srv;
let client;
let database;
const c = {}; // containers by scenario
const ts = {}; // _ts by item id

/** Sleeps until the wall clock reaches epoch second `s` (fractional). */
async function until(s) {
  const ms = s * 1000 - Date.now();
  if (ms > 0) await sleep(ms);
}

/*
 * Expiry with a one-second _ts: an item with ttl t written at _ts T is surely
 * alive while now < T + t and surely expired once now >= T + t + 1 (whether
 * the server compares with > or >=).
 */
const expiredAt = (id, ttl) => ts[id] + ttl + 1.2;

async function put(container, doc) {
  const { resource } = await container.items.create(doc);
  ts[doc.id] = resource._ts;
  return resource;
}

/** True when the item reads back. The SDK answers a missing item's read with statusCode 404, no throw. */
async function readable(container, id, pk = "p") {
  const { statusCode } = await container.item(id, pk).read();
  assert.ok(statusCode === 200 || statusCode === 404, `read ${id}: status ${statusCode}`);
  return statusCode === 200;
}

before(async () => {
  ({ srv, client, database } = await startWithDatabase());
  const mk = async (defaultTtl) => {
    const body = { id: uid("coll"), partitionKey: "/pk" };
    if (defaultTtl !== undefined) body.defaultTtl = defaultTtl;
    const { container, resource } = await database.containers.create(body);
    assert.equal(resource.defaultTtl, defaultTtl, "the container echoes its defaultTtl");
    return container;
  };
  c.two = await mk(2);
  c.minus1 = await mk(-1);
  c.none = await mk(undefined);
  c.later = await mk(undefined);

  // defaultTtl 2
  await put(c.two, { id: "a-default", pk: "p" }); // expires after 2 s
  await put(c.two, { id: "a-never", pk: "p", ttl: -1 }); // never
  await put(c.two, { id: "a-long", pk: "p", ttl: 30 }); // outlives the test
  await put(c.two, { id: "a-short", pk: "p", ttl: 1 }); // expires after 1 s
  await put(c.two, { id: "a-refresh", pk: "p", ttl: 3 }); // rewritten after 2 s
  // defaultTtl -1: items opt in
  await put(c.minus1, { id: "b-none", pk: "p" });
  await put(c.minus1, { id: "b-one", pk: "p", ttl: 1 });
  await put(c.minus1, { id: "b-never", pk: "p", ttl: -1 });
  // no defaultTtl: item ttl is ignored
  await put(c.none, { id: "c-one", pk: "p", ttl: 1 });
  await put(c.none, { id: "c-plain", pk: "p" });
  // defaultTtl set later by replacing the container
  await put(c.later, { id: "d-old", pk: "p" });
});
after(async () => {
  await srv?.stop();
});

test("items with a ttl of 2 s or more are readable right after the write", async () => {
  for (const [container, id] of [
    [c.two, "a-default"],
    [c.two, "a-never"],
    [c.two, "a-long"],
    [c.two, "a-refresh"],
    [c.minus1, "b-none"],
    [c.none, "c-one"],
  ]) {
    assert.ok(await readable(container, id), `${id} is readable at once`);
  }
  const { resource } = await c.two.item("a-long", "p").read();
  assert.equal(resource.ttl, 30, "the item keeps its ttl property");
});

test("a rewrite restarts the clock; defaultTtl set by a container replace applies to existing items", async () => {
  await until(ts["a-refresh"] + 2.05);
  const { resource } = await c.two.items.upsert({ id: "a-refresh", pk: "p", ttl: 3, v: 2 });
  const refreshedTs = resource._ts;
  assert.ok(refreshedTs >= ts["a-refresh"] + 2, "the upsert has a later _ts");
  ts["a-refresh-new"] = refreshedTs;

  const { resource: def } = await c.later.read();
  const { resource: replaced } = await c.later.replace({ ...def, defaultTtl: 1 });
  assert.equal(replaced.defaultTtl, 1);
  ts["d-replaced"] = Math.floor(Date.now() / 1000);

  // The original write would have expired by now; the rewrite has not.
  await until(ts["a-refresh"] + 4.2);
  assert.ok(Date.now() / 1000 < refreshedTs + 3, "still inside the rewritten item's lifetime");
  assert.ok(await readable(c.two, "a-refresh"), "a-refresh lives on after its rewrite");
  await until(Math.max(expiredAt("a-refresh-new", 3), ts["d-replaced"] + 2.2, expiredAt("d-old", 1)));
  assert.equal(await readable(c.two, "a-refresh"), false, "a-refresh expires 3 s after its rewrite");
  assert.equal(await readable(c.later, "d-old"), false, "an existing item expires once the container gets a defaultTtl");
});

test("expired items are gone from point reads; -1 and longer ttls stay", async () => {
  await until(Math.max(expiredAt("a-default", 2), expiredAt("a-short", 1), expiredAt("b-one", 1), expiredAt("c-one", 1)));
  const want = [
    [c.two, "a-default", false, "defaultTtl 2, no item ttl"],
    [c.two, "a-short", false, "item ttl 1 under defaultTtl 2"],
    [c.two, "a-never", true, "item ttl -1 under defaultTtl 2"],
    [c.two, "a-long", true, "item ttl 30 under defaultTtl 2"],
    [c.minus1, "b-none", true, "defaultTtl -1, no item ttl"],
    [c.minus1, "b-one", false, "item ttl 1 under defaultTtl -1"],
    [c.minus1, "b-never", true, "item ttl -1 under defaultTtl -1"],
    [c.none, "c-one", true, "item ttl 1 without a container defaultTtl is ignored"],
    [c.none, "c-plain", true, "no ttl anywhere"],
  ];
  for (const [container, id, alive, what] of want) {
    assert.equal(await readable(container, id), alive, `${what}: ${id} should be ${alive ? "alive" : "expired"}`);
  }
});

test("expired items are gone from queries (cross-partition and single-partition) and aggregates", async () => {
  await until(Math.max(expiredAt("a-default", 2), expiredAt("a-short", 1), expiredAt("b-one", 1)));
  const ids = async (container, opts) => (await container.items.query("SELECT VALUE c.id FROM c", opts).fetchAll()).resources.sort();
  assert.deepEqual(await ids(c.two), ["a-long", "a-never"].concat(await readable(c.two, "a-refresh") ? ["a-refresh"] : []).sort());
  assert.deepEqual(await ids(c.two, { partitionKey: "p" }), await ids(c.two));
  assert.deepEqual(await ids(c.minus1), ["b-never", "b-none"]);
  assert.deepEqual(await ids(c.none), ["c-one", "c-plain"]);
  const { resources: cnt } = await c.minus1.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.deepEqual(cnt, [2], "COUNT does not count expired items");
  const { resources: readAll } = await c.minus1.items.readAll().fetchAll();
  assert.deepEqual(readAll.map((d) => d.id).sort(), ["b-never", "b-none"], "the read feed skips expired items");
});

test("expired items are gone from the change feed", async () => {
  await until(Math.max(expiredAt("a-default", 2), expiredAt("a-short", 1), expiredAt("b-one", 1)));
  const feedIds = async (container) => {
    const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
    return (await drainChangeFeed(it)).items.map((d) => d.id).sort();
  };
  const two = await feedIds(c.two);
  for (const gone of ["a-default", "a-short"]) assert.ok(!two.includes(gone), `${gone} is not in the feed: ${two}`);
  for (const kept of ["a-long", "a-never"]) assert.ok(two.includes(kept), `${kept} is in the feed: ${two}`);
  assert.deepEqual(await feedIds(c.minus1), ["b-never", "b-none"]);
  const legacy = c.minus1.items.changeFeed("p", { startFromBeginning: true });
  const got = [];
  for (let pages = 0; legacy.hasMoreResults && pages < 20; pages++) got.push(...(await legacy.fetchNext()).result);
  assert.deepEqual(got.map((d) => d.id).sort(), ["b-never", "b-none"], "legacy per-key feed");
});

test("an expired item behaves as missing: create succeeds, replace/patch/delete are 404", async () => {
  await until(expiredAt("b-one", 1));
  await assert.rejects(c.minus1.item("b-one", "p").replace({ id: "b-one", pk: "p" }), code(404), "replace");
  await assert.rejects(c.minus1.item("b-one", "p").delete(), code(404), "delete");
  await assert.rejects(c.minus1.item("b-one", "p").patch([{ op: "set", path: "/x", value: 1 }]), code(404), "patch");
  const { statusCode, resource } = await c.minus1.items.create({ id: "b-one", pk: "p", ttl: -1, again: true });
  assert.equal(statusCode, 201, "create of an expired id is a fresh create, not a 409");
  assert.equal(resource.again, true);
  assert.ok(await readable(c.minus1, "b-one"));
});

test("invalid ttl values are 400", async () => {
  for (const defaultTtl of [0, -2]) {
    await assert.rejects(database.containers.create({ id: uid("bad"), partitionKey: "/pk", defaultTtl }), code(400), `defaultTtl ${JSON.stringify(defaultTtl)}`);
  }
  for (const ttl of [0, -2]) {
    await assert.rejects(c.minus1.items.create({ id: uid("bad"), pk: "p", ttl }), code(400), `item ttl ${JSON.stringify(ttl)}`);
  }
});
