// Hierarchical partition keys (partitionKey kind "MultiHash", version 2, 1-3
// paths) through the official SDK's own hierarchical-key API: PartitionKeyBuilder
// and partitionKey arrays for point operations, batch and patch; queries scoped to
// a key prefix (one, two or all levels); the change feed of a prefix, which the
// SDK reads as the EPK range [hash(prefix), hash(prefix) + "FF") with
// x-ms-start-epk / x-ms-end-epk; a logical partition prefix split across two
// ranges; the EPKs against the SDK's own hashing (docs/azure-hierarchical-keys.md).
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChangeFeedStartFrom, PartitionKeyBuilder, PartitionKeyKind } from "@azure/cosmos";

import { drainChangeFeed, rawRequest, show, sortedRanges, splitRange, uid, useDatabase } from "./harness.mjs";

let srv, database;
useDatabase((e) => ({ srv, database } = e), { partitions: 4 });

let multiModule;
/** The SDK's own MultiHash EPK of a key or prefix (utils/hashing/multiHash.js). */
async function sdkMultiEpk(values) {
  if (!multiModule) {
    multiModule = await import(new URL("./node_modules/@azure/cosmos/dist/esm/utils/hashing/multiHash.js", import.meta.url).href);
  }
  return multiModule.hashMultiHashPartitionKey(values);
}

const PATHS = ["/tenantId", "/userId", "/sessionId"];

async function newContainer(paths = PATHS, extra = {}) {
  const id = uid("hk");
  const { container, resource } = await database.containers.create({
    id,
    partitionKey: { paths, kind: PartitionKeyKind.MultiHash, version: 2 },
    ...extra,
  });
  return { container, resource, id };
}

const doc = (tenantId, userId, sessionId, n) => ({ id: `d-${tenantId}-${userId}-${sessionId}-${n}`, tenantId, userId, sessionId, n });
const fullKey = (d) => [d.tenantId, d.userId, d.sessionId];

/** t1 holds two users with two sessions each, t2 one user: 5 logical partitions, 10 items. */
async function seed(container) {
  const docs = [];
  for (const [t, u, s] of [
    ["t1", "u1", "s1"],
    ["t1", "u1", "s2"],
    ["t1", "u2", "s1"],
    ["t1", "u2", "s2"],
    ["t2", "u1", "s1"],
  ]) {
    for (let n = 0; n < 2; n++) {
      const d = doc(t, u, s, n);
      const { statusCode } = await container.items.create(d);
      assert.equal(statusCode, 201);
      docs.push(d);
    }
  }
  return docs;
}

const ids = (items) => items.map((d) => d.id).sort();

test("a MultiHash container keeps its definition; two kinds of bad definitions are refused", async () => {
  const { resource, container } = await newContainer();
  assert.deepEqual(resource.partitionKey, { paths: PATHS, kind: "MultiHash", version: 2 }, JSON.stringify(resource));
  const { resource: read } = await container.read();
  assert.equal(read.partitionKey.kind, "MultiHash");

  for (const partitionKey of [
    { paths: ["/a", "/b", "/c", "/d"], kind: "MultiHash", version: 2 },
    { paths: ["/a", "/b"], kind: "Hash", version: 2 },
  ]) {
    await assert.rejects(database.containers.create({ id: uid("bad"), partitionKey }), (e) => e.code === 400, JSON.stringify(partitionKey));
  }
});

test("point operations, patch and batch with the full key (PartitionKeyBuilder and arrays)", async () => {
  const { container } = await newContainer();
  const d = doc("t1", "u1", "s1", 0);
  await container.items.create(d);
  const pk = new PartitionKeyBuilder().addValue("t1").addValue("u1").addValue("s1").build();

  const { resource: r1, statusCode: s1 } = await container.item(d.id, pk).read();
  assert.equal(s1, 200);
  assert.equal(r1.n, 0);
  const { resource: r2 } = await container.item(d.id, ["t1", "u1", "s1"]).read();
  assert.equal(r2.id, d.id);

  // Another logical partition of the same id is a different item.
  await container.items.create({ ...d, sessionId: "s2", n: 7 });
  assert.equal((await container.item(d.id, ["t1", "u1", "s2"]).read()).resource.n, 7);
  assert.equal((await container.item(d.id, ["t1", "u1", "s3"]).read()).statusCode, 404);

  await container.item(d.id, pk).replace({ ...d, n: 1 });
  const { resource: p } = await container.item(d.id, pk).patch([{ op: "incr", path: "/n", value: 10 }]);
  assert.equal(p.n, 11);
  await assert.rejects(container.item(d.id, pk).patch([{ op: "set", path: "/userId", value: "x" }]), (e) => e.code === 400, "a key path cannot be patched");
  await container.items.upsert({ ...d, n: 20 });
  assert.equal((await container.item(d.id, pk).read()).resource.n, 20);

  const { result } = await container.items.batch(
    [
      { operationType: "Create", resourceBody: { id: "b1", tenantId: "t9", userId: "u9", sessionId: "s9" } },
      { operationType: "Upsert", resourceBody: { id: "b2", tenantId: "t9", userId: "u9", sessionId: "s9" } },
      { operationType: "Read", id: "b1" },
    ],
    ["t9", "u9", "s9"],
  );
  assert.deepEqual(
    result.map((r) => r.statusCode),
    [201, 201, 200],
  );
  assert.equal((await container.item("b2", ["t9", "u9", "s9"]).read()).statusCode, 200);

  assert.equal((await container.item(d.id, pk).delete()).statusCode, 204);
  assert.equal((await container.item(d.id, pk).read()).statusCode, 404);
});

test("a point operation with only a prefix of the key is 400; a body that disagrees with the key is 400", async () => {
  const { container, id } = await newContainer();
  await container.items.create(doc("t1", "u1", "s1", 0));
  const r = await rawRequest(srv, {
    path: `/dbs/${database.id}/colls/${id}/docs/d-t1-u1-s1-0`,
    headers: { "x-ms-documentdb-partitionkey": JSON.stringify(["t1", "u1"]) },
  });
  assert.equal(r.status, 400, show(r));
  const w = await rawRequest(srv, {
    method: "POST",
    path: `/dbs/${database.id}/colls/${id}/docs`,
    headers: { "x-ms-documentdb-partitionkey": JSON.stringify(["t1", "u1", "sX"]) },
    body: doc("t1", "u1", "s1", 1),
  });
  assert.equal(w.status, 400, show(w));
});

test("queries scoped to a prefix of one, two or all levels, and across the container", async () => {
  const { container, id: collId } = await newContainer();
  const docs = await seed(container);
  const q = "SELECT * FROM c";
  const run = async (partitionKey) => (await container.items.query(q, partitionKey === undefined ? {} : { partitionKey }).fetchAll()).resources;

  assert.deepEqual(ids(await run()), ids(docs), "the whole container");
  assert.deepEqual(ids(await run(["t1"])), ids(docs.filter((d) => d.tenantId === "t1")), "tenant t1");
  assert.deepEqual(ids(await run(["t1", "u2"])), ids(docs.filter((d) => d.tenantId === "t1" && d.userId === "u2")), "t1/u2");
  assert.deepEqual(ids(await run(["t1", "u2", "s1"])), ids(docs.filter((d) => d.tenantId === "t1" && d.userId === "u2" && d.sessionId === "s1")), "t1/u2/s1");
  assert.deepEqual(ids(await run(new PartitionKeyBuilder().addValue("t2").build())), ids(docs.filter((d) => d.tenantId === "t2")), "tenant t2 by builder");
  assert.deepEqual(await run(["t3"]), [], "a tenant with nothing");

  // The same prefix scope on the wire: the partition key header with the first level only.
  const raw = await rawRequest(srv, {
    method: "POST",
    path: `/dbs/${database.id}/colls/${collId}/docs`,
    headers: { "content-type": "application/query+json", "x-ms-documentdb-isquery": "True", "x-ms-documentdb-partitionkey": JSON.stringify(["t1"]) },
    body: { query: q, parameters: [] },
  });
  assert.equal(raw.status, 200, show(raw));
  assert.deepEqual(ids(raw.json.Documents), ids(docs.filter((d) => d.tenantId === "t1")), "a raw prefix-scoped query");

  const { resources: counted } = await container.items.query("SELECT VALUE COUNT(1) FROM c", { partitionKey: ["t1"] }).fetchAll();
  assert.deepEqual(counted, [8], "an aggregate within a prefix");
});

test("the EPK of each item is the SDK's MultiHash hash: the pkranges hold it", async () => {
  // Recomputed here with the SDK's hashing, so any difference in the server's placement shows.
  const { container, id } = await newContainer(PATHS);
  await seed(container);
  const ranges = await sortedRanges(container);
  for (const key of [["t1", "u1", "s1"], ["t2", "u1", "s1"]]) {
    const epk = await sdkMultiEpk(key);
    assert.equal(epk.length, 96, epk);
    const range = ranges.find((r) => r.minInclusive <= epk && epk < r.maxExclusive);
    const r = await rawRequest(srv, {
      path: `/dbs/${database.id}/colls/${id}/docs`,
      headers: { "a-im": "Incremental Feed", "x-ms-documentdb-partitionkeyrangeid": range.id, "x-ms-start-epk": epk, "x-ms-end-epk": `${epk}FF` },
    });
    assert.equal(r.status, 200, show(r));
    assert.deepEqual(
      r.json.Documents.map((d) => fullKey(d)),
      [key, key],
      `the range ${range.id} scoped to the EPK of ${JSON.stringify(key)} holds exactly its items`,
    );
  }
});

test("the change feed of a prefix (one and two levels) sees exactly that prefix's changes", async () => {
  const { container } = await newContainer();
  const docs = await seed(container);
  const read = async (prefix) => (await drainChangeFeed(container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(prefix) }))).items;

  assert.deepEqual(ids(await read(["t1"])), ids(docs.filter((d) => d.tenantId === "t1")));
  assert.deepEqual(ids(await read(["t1", "u1"])), ids(docs.filter((d) => d.tenantId === "t1" && d.userId === "u1")));
  assert.deepEqual(ids(await read(["t2", "u1", "s1"])), ids(docs.filter((d) => d.tenantId === "t2")), "the full key");

  // From now: a later write in the prefix appears, one outside it does not.
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now(["t1", "u2"]) });
  assert.equal((await it.readNext()).statusCode, 304);
  await container.items.create(doc("t1", "u2", "s9", 0));
  await container.items.create(doc("t1", "u3", "s1", 0));
  assert.deepEqual(ids((await drainChangeFeed(it)).items), ["d-t1-u2-s9-0"]);
});

test("a tenant split across two ranges: queries, point reads and its change feed still see it whole", async () => {
  const { container, id } = await newContainer(["/tenantId", "/userId"]);
  const docs = [];
  for (let u = 0; u < 12; u++) {
    const d = { id: `x${u}`, tenantId: "big", userId: `u${u}`, n: u };
    await container.items.create(d);
    docs.push(d);
  }
  await container.items.create({ id: "other", tenantId: "small", userId: "u0" });
  const cf = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(["big"]) });
  assert.deepEqual(ids((await drainChangeFeed(cf)).items), ids(docs));

  // Cut the tenant's span in the middle of its second level: some users on each side.
  const tenant = await sdkMultiEpk(["big"]);
  const at = `${tenant}2`;
  const [parent] = (await sortedRanges(container)).filter((r) => r.minInclusive <= tenant && tenant < r.maxExclusive);
  const split = await splitRange(srv, database.id, id, parent.id, at);
  assert.equal(split.status, 200, show(split));
  const children = split.json.children;
  assert.equal(children[0].maxExclusive, at);
  assert.equal(children[1].minInclusive, at);
  const sides = await Promise.all(
    docs.map(async (d) => ((await sdkMultiEpk([d.tenantId, d.userId])) < at ? 0 : 1)),
  );
  assert.ok(sides.includes(0) && sides.includes(1), "the tenant's users are on both sides of the cut");

  const { resources } = await container.items.query("SELECT * FROM c", { partitionKey: ["big"] }).fetchAll();
  assert.deepEqual(ids(resources), ids(docs), "the tenant's query spans both children");
  for (const d of docs) assert.equal((await container.item(d.id, [d.tenantId, d.userId]).read()).resource.n, d.n);

  await container.items.upsert({ ...docs[0], n: 100 });
  await container.items.upsert({ ...docs[11], n: 111 });
  const tail = await drainChangeFeed(cf);
  assert.deepEqual(ids(tail.items), ids([docs[0], docs[11]]), "the prefix iterator continues on both children");
  const fresh = await drainChangeFeed(container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(["big"]) }));
  assert.deepEqual(ids(fresh.items), ids(docs), "a new prefix iterator after the split");
});

test("after a restart the container still places, reads and scopes by its hierarchical key", async () => {
  const { container, id } = await newContainer();
  const docs = await seed(container);
  await srv.restart();
  const c2 = srv.client().database(database.id).container(id);
  assert.equal((await c2.item(docs[0].id, fullKey(docs[0])).read()).resource.n, docs[0].n);
  const { resources } = await c2.items.query("SELECT * FROM c", { partitionKey: ["t1", "u1"] }).fetchAll();
  assert.deepEqual(ids(resources), ids(docs.filter((d) => d.tenantId === "t1" && d.userId === "u1")));
  const created = doc("t3", "u1", "s1", 0);
  await c2.items.create(created);
  assert.equal((await c2.item(created.id, fullKey(created)).read()).statusCode, 200);
});
