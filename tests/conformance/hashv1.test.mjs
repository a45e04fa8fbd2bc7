// Containers with partitionKey version 1 (the legacy hash): cosmolite places their
// documents by the V1 effective partition key, the one the SDK computes for such a
// container (hashing/v1.js: MurmurHash3-32 of the typed value, then the encoded
// hash and value). So the pkranges boundaries, range-scoped reads and the change
// feed per range agree with the SDK, and the SDK's bulk API, which groups the
// operations by the range its own EPK names, lands every operation in its range.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BulkOperationType } from "@azure/cosmos";

import { rawRequest, sdkEpk, show, splitRange, startCosmolite, uid } from "./harness.mjs";

const PARTITIONS = 4;
let srv;
let database;
let hashV1;

before(async () => {
  ({ hashV1PartitionKey: hashV1 } = await import(
    new URL("./node_modules/@azure/cosmos/dist/esm/utils/hashing/v1.js", import.meta.url).href
  ));
  srv = await startCosmolite(null, { partitions: PARTITIONS });
  ({ database } = await srv.client().databases.create({ id: uid("db") }));
});
after(async () => {
  await srv?.stop();
});

/** The SDK's own V1 EPK of a partition key value (uppercase hex). */
const sdkEpkV1 = (value) => hashV1([value]).toUpperCase();

async function v1Container() {
  const { container } = await database.containers.create({
    id: uid("v1"),
    partitionKey: { paths: ["/pk"], kind: "Hash", version: 1 },
  });
  return container;
}

async function ranges(container) {
  const { resources } = await container.readPartitionKeyRanges().fetchAll();
  return [...resources].sort((a, b) => (a.minInclusive < b.minInclusive ? -1 : 1));
}

const inRange = (epk, r) => epk >= r.minInclusive && (r.maxExclusive === "FF" || epk < r.maxExclusive);

/** Every document of each range's own change feed, by range id. */
async function feedsByRange(container) {
  const out = new Map();
  for (const r of await ranges(container)) {
    const res = await rawRequest(srv, {
      path: `/dbs/${database.id}/colls/${container.id}/docs`,
      headers: { "a-im": "Incremental Feed", "x-ms-documentdb-partitionkeyrangeid": r.id, "x-ms-max-item-count": "1000" },
    });
    assert.ok(res.status === 200 || res.status === 304, `feed of range ${r.id}: ${show(res)}`);
    out.set(r, res.status === 200 ? res.json.Documents : []);
  }
  return out;
}

/** Each range's feed holds exactly the documents whose SDK V1 EPK falls in that range. */
function assertPlacedByV1(byRange, written, what) {
  let total = 0;
  let used = 0;
  for (const [r, docs] of byRange) {
    for (const d of docs) {
      const epk = sdkEpkV1(d.pk);
      assert.ok(inRange(epk, r), `${what}: ${JSON.stringify(d.pk)} (V1 EPK ${epk}) in range ${r.id} [${r.minInclusive}, ${r.maxExclusive})`);
    }
    total += docs.length;
    if (docs.length > 0) used++;
  }
  assert.equal(total, written, `${what}: every document in exactly one range`);
  assert.ok(used >= 2, `${what}: the documents spread over ${used} ranges`);
}

test("a V1 container's ranges cut the V1 hash space and each range's feed holds what the SDK's V1 EPK says", async () => {
  const container = await v1Container();
  const list = await ranges(container);
  assert.equal(list.length, PARTITIONS);
  assert.equal(list[0].minInclusive, "");
  assert.equal(list[PARTITIONS - 1].maxExclusive, "FF");
  const keys = [];
  for (let i = 0; i < 40; i++) keys.push(i % 3 === 0 ? i : `key-${i}`);
  keys.push(true, null, "");
  for (const [i, pk] of keys.entries()) await container.items.create({ id: `d${i}`, pk });
  assertPlacedByV1(await feedsByRange(container), keys.length, "after the writes");
  // Point reads go through the partition key header; every document is found.
  for (const [i, pk] of keys.entries()) assert.equal((await container.item(`d${i}`, pk).read()).statusCode, 200, `read d${i}`);
  // Placement by V2 would not pass the check above: the two hashes name other ranges.
  const v2 = await Promise.all(keys.map((pk) => sdkEpk(pk)));
  const differ = keys.filter((pk, i) => list.findIndex((r) => inRange(sdkEpkV1(pk), r)) !== list.findIndex((r) => inRange(v2[i], r)));
  assert.ok(differ.length > 0, "V1 and V2 place some of these keys in different ranges");
});

test("the SDK's bulk API on a V1 container: every operation lands in the range the SDK grouped it by", async () => {
  const container = await v1Container();
  const ops = Array.from({ length: 60 }, (_, i) => ({
    operationType: BulkOperationType.Create,
    resourceBody: { id: `b${i}`, pk: `bulk-${i}`, i },
  }));
  const results = await container.items.bulk(ops);
  results.forEach((r, i) => assert.equal(r.statusCode, 201, `op ${i}: ${JSON.stringify(r)}`));
  assertPlacedByV1(await feedsByRange(container), ops.length, "after the bulk");
});

test("a split of a V1 range cuts its hash span in half; the children's feeds still agree with the SDK", async () => {
  const container = await v1Container();
  for (let i = 0; i < 40; i++) await container.items.create({ id: `s${i}`, pk: `split-${i}` });
  const before = await ranges(container);
  const split = await splitRange(srv, database.id, container.id, before[1].id);
  assert.equal(split.status, 200, show(split));
  const afterList = await ranges(container);
  assert.equal(afterList.length, PARTITIONS + 1);
  const kids = afterList.filter((r) => (r.parents ?? []).includes(before[1].id));
  assert.equal(kids.length, 2);
  assert.equal(kids[0].minInclusive, before[1].minInclusive);
  assert.equal(kids[1].maxExclusive, before[1].maxExclusive);
  assert.ok(kids[0].maxExclusive.startsWith("05"), `the cut is a V1 hash boundary: ${kids[0].maxExclusive}`);
  assertPlacedByV1(await feedsByRange(container), 40, "after the split");
});
