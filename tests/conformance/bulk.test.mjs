// Bulk (docs/azure-bulk.md) through the official SDK's
// container.items.executeBulkOperations and the older container.items.bulk,
// and by raw HTTP: non-atomic batches (x-ms-cosmos-batch-atomic: false)
// scoped by partition key range id, in which each operation succeeds or fails
// on its own and the answer lists every operation's outcome in order; across
// several ranges; through a split (410/1002, which the SDK answers by
// re-grouping its operations by the new ranges); and under provisioned
// throughput, where operations past the range's budget answer 429/3200 and
// the SDK retries just those.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { BulkOperationType } from "@azure/cosmos";

import { adminRequest, rawRequest, show, splitRange, startCosmolite, startWithDatabase, uid } from "./harness.mjs";

let srv;
let client;
let database;

before(async () => {
  ({ srv, client, database } = await startWithDatabase({ partitions: 4 }));
});
after(async () => {
  await srv?.stop();
});

async function newContainer(opts = {}) {
  const id = uid("coll");
  const { container, resource } = await database.containers.create({ id, partitionKey: "/pk", ...opts });
  return { container, id, rid: resource._rid, docsPath: `/dbs/${database.id}/colls/${id}/docs` };
}

/** The ids of a container's partition key ranges, in order. */
async function rangeIds(container) {
  const { resources } = await container.readPartitionKeyRanges().fetchAll();
  return resources.map((r) => r.id);
}

/** A raw bulk request (what the SDKs send) scoped to range `range`. */
function rawBulk(docsPath, range, ops, extraHeaders = {}) {
  return rawRequest(srv, {
    method: "POST",
    path: docsPath,
    headers: {
      "x-ms-cosmos-is-batch-request": "True",
      "x-ms-cosmos-batch-atomic": "False",
      "x-ms-cosmos-batch-continue-on-error": "True",
      ...(range === null ? {} : { "x-ms-documentdb-partitionkeyrangeid": range }),
      ...extraHeaders,
    },
    body: ops,
  });
}

/** The "N requests were answered 429/3200" figure of a stopped server (0 when not logged). */
function throttledCount(s) {
  const m = /throughput: (\d+) requests were answered 429\/3200/.exec(s.stderr());
  return m ? Number(m[1]) : 0;
}

/** Status code of one executeBulkOperations result, success or failure. */
const statusOf = (r) => r.response?.statusCode ?? r.error?.code;

test("executeBulkOperations: mixed create/upsert/replace/delete/read/patch; the failing ones (409, 404, 412) fail alone and the others apply", async () => {
  const { container } = await newContainer();
  // Existing items, spread over the four ranges.
  for (const id of ["dup", "old", "rep", "gone", "pat", "cas"]) {
    await container.items.create({ id, pk: `p-${id}`, v: 0 });
  }
  const { etag: casEtag } = await container.item("cas", "p-cas").read();
  const ops = [
    { operationType: BulkOperationType.Create, partitionKey: "p-new1", resourceBody: { id: "new1", pk: "p-new1", v: 1 } },
    { operationType: BulkOperationType.Create, partitionKey: "p-dup", resourceBody: { id: "dup", pk: "p-dup", v: 1 } }, // 409
    { operationType: BulkOperationType.Upsert, partitionKey: "p-old", resourceBody: { id: "old", pk: "p-old", v: 1 } },
    { operationType: BulkOperationType.Replace, id: "rep", partitionKey: "p-rep", resourceBody: { id: "rep", pk: "p-rep", v: 1 } },
    { operationType: BulkOperationType.Replace, id: "nope", partitionKey: "p-nope", resourceBody: { id: "nope", pk: "p-nope", v: 1 } }, // 404
    { operationType: BulkOperationType.Delete, id: "gone", partitionKey: "p-gone" },
    { operationType: BulkOperationType.Delete, id: "never", partitionKey: "p-never" }, // 404
    { operationType: BulkOperationType.Read, id: "dup", partitionKey: "p-dup" },
    { operationType: BulkOperationType.Read, id: "missing", partitionKey: "p-missing" }, // 404
    {
      operationType: BulkOperationType.Patch,
      id: "pat",
      partitionKey: "p-pat",
      resourceBody: { operations: [{ op: "set", path: "/v", value: 7 }] },
    },
    {
      operationType: BulkOperationType.Replace,
      id: "cas",
      partitionKey: "p-cas",
      ifMatch: '"not-the-etag"',
      resourceBody: { id: "cas", pk: "p-cas", v: 1 },
    }, // 412
    {
      operationType: BulkOperationType.Replace,
      id: "cas",
      partitionKey: "p-cas",
      ifMatch: casEtag,
      resourceBody: { id: "cas", pk: "p-cas", v: 2 },
    },
  ];
  const results = await container.items.executeBulkOperations(ops);
  assert.equal(results.length, ops.length);
  assert.deepEqual(
    results.map(statusOf),
    [201, 409, 200, 200, 404, 204, 404, 200, 404, 200, 412, 200],
    JSON.stringify(results.map((r) => [r.operationInput.operationType, r.operationInput.id, statusOf(r)])),
  );
  results.forEach((r, i) => assert.equal(r.operationInput.operationType, ops[i].operationType, `result ${i} in order`));
  // Every success carries its etag and charge; writes and reads their document.
  for (const r of results.filter((x) => x.response)) {
    assert.ok(r.response.requestCharge > 0, `a charge: ${JSON.stringify(r.response)}`);
    if (r.response.statusCode !== 204) {
      assert.match(r.response.eTag ?? "", /^".+"$/, "an etag");
      assert.ok(r.response.resourceBody?.id, "the document");
    }
  }
  assert.equal(results[7].response.resourceBody.v, 0, "the read saw the untouched item");
  assert.equal(results[9].response.resourceBody.v, 7, "the patched document");
  // The survivors applied; the failures changed nothing.
  const read = async (id) => (await container.item(id, `p-${id}`).read()).resource;
  assert.equal((await read("new1")).v, 1);
  assert.equal((await read("dup")).v, 0, "a failed create leaves the item as it was");
  assert.equal((await read("old")).v, 1);
  assert.equal((await read("rep")).v, 1);
  assert.equal(await read("nope"), undefined, "a failed replace creates nothing");
  assert.equal(await read("gone"), undefined);
  assert.equal((await read("pat")).v, 7);
  assert.equal((await read("cas")).v, 2, "the If-Match replace applied, the stale one did not");
});

test("items.bulk (the older API) across four ranges: every operation lands in its own range, results in input order", async () => {
  const { container } = await newContainer();
  assert.equal((await rangeIds(container)).length, 4);
  const ops = Array.from({ length: 120 }, (_, i) => ({
    operationType: BulkOperationType.Create,
    resourceBody: { id: `d${i}`, pk: `p${i}`, i },
  }));
  ops.push({ operationType: BulkOperationType.Create, partitionKey: "p3", resourceBody: { id: "d3", pk: "p3", i: -1 } }); // 409
  const results = await container.items.bulk(ops);
  assert.equal(results.length, 121);
  results.slice(0, 120).forEach((r, i) => {
    assert.equal(r.statusCode, 201, `op ${i}: ${JSON.stringify(r)}`);
    assert.equal(r.resourceBody.i, i, `result ${i} belongs to op ${i}`);
  });
  assert.equal(results[120].statusCode, 409);
  const { resources } = await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.equal(resources[0], 120);
  // Every item is where a point read (routed by the key's EPK) finds it.
  for (let i = 0; i < 120; i += 17) {
    assert.equal((await container.item(`d${i}`, `p${i}`).read()).resource?.i, i);
  }
});

test("raw bulk: 207 with each operation's own status, a key outside the range fails alone with 410/1002, one session token", async () => {
  const { container, docsPath } = await newContainer();
  const ranges = await rangeIds(container);
  // Find two keys on range ranges[0] and one elsewhere, through point writes' session tokens.
  const home = [];
  let away = null;
  for (let i = 0; home.length < 2 || away === null; i++) {
    const { headers } = await container.items.create({ id: `probe${i}`, pk: `k${i}` });
    const range = headers["x-ms-session-token"].split(":")[0];
    if (range === ranges[0] && home.length < 2) home.push(`k${i}`);
    else if (range !== ranges[0] && away === null) away = `k${i}`;
    assert.ok(i < 200, "found keys on two ranges");
  }
  const r = await rawBulk(docsPath, ranges[0], [
    { operationType: "Create", partitionKey: JSON.stringify([home[0]]), resourceBody: { id: "a", pk: home[0] } },
    { operationType: "Create", partitionKey: JSON.stringify([away]), resourceBody: { id: "b", pk: away } },
    { operationType: "Upsert", partitionKey: JSON.stringify([home[1]]), resourceBody: { id: "c", pk: home[1] } },
    { operationType: "Create", partitionKey: JSON.stringify([home[0]]), resourceBody: { id: "a", pk: home[0] } },
  ]);
  assert.equal(r.status, 207, show(r));
  assert.deepEqual(
    r.json.map((o) => [o.statusCode, o.subStatusCode ?? 0]),
    [
      [201, 0],
      [410, 1002],
      [201, 0],
      [409, 0],
    ],
    show(r),
  );
  assert.match(r.headers["x-ms-session-token"] ?? "", new RegExp(`^${ranges[0]}:`), "the range's session token");
  assert.ok(Number(r.headers["x-ms-request-charge"]) > 0);
  assert.equal((await container.item("a", home[0]).read()).statusCode, 200);
  assert.equal((await container.item("c", home[1]).read()).statusCode, 200);
  assert.equal((await container.item("b", away).read()).statusCode, 404, "the misrouted op wrote nothing");
  // All operations succeeding: 200.
  const ok = await rawBulk(docsPath, ranges[0], [
    { operationType: "Read", id: "a", partitionKey: JSON.stringify([home[0]]) },
  ]);
  assert.equal(ok.status, 200, show(ok));
  assert.equal(ok.json[0].statusCode, 200);
  assert.equal(ok.json[0].resourceBody.id, "a");
});

test("raw bulk: continue-on-error false stops at the first failure (the rest 424, not applied); bad requests are 400 naming why", async () => {
  const { container, docsPath } = await newContainer();
  const [range] = await rangeIds(container);
  const pkOn = async () => {
    for (let i = 0; ; i++) {
      const { headers } = await container.items.upsert({ id: "probe", pk: `q${i}` });
      if (headers["x-ms-session-token"].split(":")[0] === range) return `q${i}`;
      assert.ok(i < 200);
    }
  };
  const pk = await pkOn();
  const pkText = JSON.stringify([pk]);
  const r = await rawBulk(
    docsPath,
    range,
    [
      { operationType: "Create", partitionKey: pkText, resourceBody: { id: "s1", pk } },
      { operationType: "Delete", partitionKey: pkText, id: "absent" },
      { operationType: "Create", partitionKey: pkText, resourceBody: { id: "s2", pk } },
    ],
    { "x-ms-cosmos-batch-continue-on-error": "False" },
  );
  assert.equal(r.status, 207, show(r));
  assert.deepEqual(
    r.json.map((o) => o.statusCode),
    [201, 404, 424],
  );
  assert.equal((await container.item("s1", pk).read()).statusCode, 200, "the op before the failure stays");
  assert.equal((await container.item("s2", pk).read()).statusCode, 404, "the op after it never ran");

  const noRange = await rawBulk(docsPath, null, [{ operationType: "Read", id: "s1", partitionKey: pkText }]);
  assert.equal(noRange.status, 400, show(noRange));
  assert.match(noRange.json.message, /x-ms-documentdb-partitionkeyrangeid/);
  const unknown = await rawBulk(docsPath, "999", [{ operationType: "Read", id: "s1", partitionKey: pkText }]);
  assert.equal(unknown.status, 400, show(unknown));
  assert.match(unknown.json.message, /999/);
  const badOp = await rawBulk(docsPath, range, [{ operationType: "Frobnicate", id: "x" }]);
  assert.equal(badOp.status, 400, show(badOp));
  assert.match(badOp.json.message, /operation 0/);
  const tooMany = await rawBulk(
    docsPath,
    range,
    Array.from({ length: 101 }, () => ({ operationType: "Read", id: "s1", partitionKey: pkText })),
  );
  assert.equal(tooMany.status, 400, show(tooMany));
  assert.match(tooMany.json.message, /101 operations/);
});

test("bulk during a split: requests for the retired range get 410/1002 and both SDK APIs re-group by the children, applying every operation once", async () => {
  const { container, id } = await newContainer();
  const ranges = await rangeIds(container);
  // Warm the SDK's range cache, then split every range under it.
  const warm = await container.items.executeBulkOperations([
    { operationType: BulkOperationType.Create, partitionKey: "w", resourceBody: { id: "warm", pk: "w" } },
  ]);
  assert.equal(statusOf(warm[0]), 201);
  await container.items.bulk([{ operationType: BulkOperationType.Create, partitionKey: "w", resourceBody: { id: "warm2", pk: "w" } }]);
  for (const range of ranges) {
    const r = await splitRange(srv, database.id, id, range);
    assert.equal(r.status, 200, show(r));
  }
  // The old range ids are gone on the wire.
  const gone = await rawBulk(`/dbs/${database.id}/colls/${id}/docs`, ranges[0], [
    { operationType: "Read", id: "warm", partitionKey: '["w"]' },
  ]);
  assert.equal(gone.status, 410, show(gone));
  assert.equal(gone.headers["x-ms-substatus"], "1002");

  const current = await container.items.executeBulkOperations(
    Array.from({ length: 60 }, (_, i) => ({
      operationType: BulkOperationType.Upsert,
      partitionKey: `p${i}`,
      resourceBody: { id: `n${i}`, pk: `p${i}`, api: "current" },
    })),
  );
  assert.deepEqual(
    current.map(statusOf),
    Array(60).fill(201),
    JSON.stringify(current.filter((r) => statusOf(r) !== 201).slice(0, 3)),
  );
  // The older API, whose cache also still holds the parents: its own split handling.
  const legacy = await container.items.bulk(
    Array.from({ length: 60 }, (_, i) => ({
      operationType: BulkOperationType.Create,
      resourceBody: { id: `o${i}`, pk: `p${i}`, api: "legacy" },
    })),
  );
  assert.deepEqual(
    legacy.map((r) => r.statusCode),
    Array(60).fill(201),
  );
  legacy.forEach((r, i) => assert.equal(r.resourceBody.id, `o${i}`, "in input order"));
  const { resources } = await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.equal(resources[0], 122, "every operation applied once");
});

test("bulk after a merge: the merged-away ranges answer 410/1002 and both SDK APIs re-group onto the new range", async () => {
  const { container, id } = await newContainer();
  const ranges = await rangeIds(container);
  const warm = await container.items.executeBulkOperations([
    { operationType: BulkOperationType.Create, partitionKey: "w", resourceBody: { id: "warm", pk: "w" } },
  ]);
  assert.equal(statusOf(warm[0]), 201);
  await container.items.bulk([{ operationType: BulkOperationType.Create, partitionKey: "w", resourceBody: { id: "warm2", pk: "w" } }]);
  const r = await adminRequest(srv, "POST", "merge", { db: database.id, coll: id, ranges: [ranges[0], ranges[1]] });
  assert.equal(r.status, 200, show(r));
  const gone = await rawBulk(`/dbs/${database.id}/colls/${id}/docs`, ranges[1], [
    { operationType: "Read", id: "warm", partitionKey: '["w"]' },
  ]);
  assert.equal(gone.status, 410, show(gone));
  assert.equal(gone.headers["x-ms-substatus"], "1002");

  const current = await container.items.executeBulkOperations(
    Array.from({ length: 60 }, (_, i) => ({
      operationType: BulkOperationType.Create,
      partitionKey: `p${i}`,
      resourceBody: { id: `n${i}`, pk: `p${i}` },
    })),
  );
  assert.deepEqual(current.map(statusOf), Array(60).fill(201));
  const legacy = await container.items.bulk(
    Array.from({ length: 60 }, (_, i) => ({
      operationType: BulkOperationType.Create,
      resourceBody: { id: `o${i}`, pk: `p${i}` },
    })),
  );
  assert.deepEqual(
    legacy.map((x) => x.statusCode),
    Array(60).fill(201),
  );
  const { resources } = await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.equal(resources[0], 122, "every operation applied once");
});

test("bulk under --default-throughput 400: operations past the budget answer 429/3200 alone and the SDK's retries complete every one", async (t) => {
  const tsrv = await startCosmolite(t, { partitions: 1, args: ["--default-throughput", "400"] });
  const tclient = tsrv.client({
    connectionPolicy: { retryOptions: { maxRetryAttemptCount: 1000, maxWaitTimeInSeconds: 120 } },
  });
  const { database: db } = await tclient.databases.create({ id: uid("db") });
  const { container, resource } = await db.containers.create({ id: "c", partitionKey: "/pk" });
  // 16 KiB documents (about 10 RU each): 100 of them are 2.5 s of a 400 RU/s budget, so a
  // bulk of 200 outruns it however slow the server is.
  const pad = "h".repeat(16 * 1024);
  const ops = Array.from({ length: 200 }, (_, i) => ({
    operationType: BulkOperationType.Create,
    partitionKey: `p${i % 5}`,
    resourceBody: { id: `d${i}`, pk: `p${i % 5}`, pad },
  }));
  const results = await container.items.executeBulkOperations(ops);
  assert.deepEqual(
    results.map(statusOf),
    Array(200).fill(201),
    JSON.stringify(results.filter((r) => statusOf(r) !== 201).map((r) => [r.error?.code, r.error?.substatus]).slice(0, 3)),
  );
  const { resources } = await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.equal(resources[0], 200, "every operation applied once");
  assert.ok(resource._rid);
  await tsrv.stop();
  assert.ok(throttledCount(tsrv) > 0, "the SDK's bulk was throttled, and retried to completion");
});

test("raw bulk past a range's budget: 207, the operations from the first refused one on answer 429/3200 with retryAfterMilliseconds", async (t) => {
  const tsrv = await startCosmolite(t, { partitions: 1, args: ["--default-throughput", "400"] });
  const tclient = tsrv.client();
  const { database: db } = await tclient.databases.create({ id: uid("db") });
  await db.containers.create({ id: "c", partitionKey: "/pk" });
  const pad = "h".repeat(16 * 1024);
  const docsPath = `/dbs/${db.id}/colls/c/docs`;
  // Ids per round, so that the last round's outcome can be checked on its own.
  const big = (round) =>
    Array.from({ length: 100 }, (_, i) => ({
      operationType: "Upsert",
      partitionKey: '["p0"]',
      resourceBody: { id: `w${round}-${i}`, pk: "p0", pad },
    }));
  let r;
  let round = 0;
  for (; round < 20; round++) {
    r = await rawRequest(tsrv, {
      method: "POST",
      path: docsPath,
      headers: {
        "x-ms-cosmos-is-batch-request": "True",
        "x-ms-cosmos-batch-atomic": "False",
        "x-ms-documentdb-partitionkeyrangeid": "0",
      },
      body: big(round),
    });
    if (r.status === 207) break;
    // A bulk that arrives while the range is in debt is refused whole (429), as any request;
    // one that the budget (refilling meanwhile on a slow machine) covered is 200.
    if (r.status === 429) await new Promise((res) => setTimeout(res, Number(r.headers["x-ms-retry-after-ms"])));
    else assert.equal(r.status, 200, show(r));
  }
  assert.equal(r.status, 207, show(r));
  const throttled = r.json.filter((o) => o.statusCode === 429);
  assert.ok(throttled.length > 0 && r.json[0].statusCode < 300, show(r));
  for (const o of throttled) {
    assert.equal(o.subStatusCode, 3200);
    assert.ok(o.retryAfterMilliseconds > 0, JSON.stringify(o));
  }
  const firstThrottled = r.json.findIndex((o) => o.statusCode === 429);
  assert.ok(r.json.slice(firstThrottled).every((o) => o.statusCode === 429), "from the first throttled op on");
  assert.ok(Number(r.headers["x-ms-request-charge"]) > 0, "the operations that ran are charged");
  // The throttled operations were not applied; the ones before them were.
  const ids = new Set(
    (await db.container("c").items.query("SELECT VALUE c.id FROM c").fetchAll()).resources,
  );
  r.json.forEach((o, i) => assert.equal(ids.has(`w${round}-${i}`), o.statusCode < 300, `op ${i}: ${o.statusCode}`));
  await tsrv.stop();
  assert.ok(throttledCount(tsrv) > 0, "the server counted its 429s");
});

test("an atomic batch is unchanged: without x-ms-cosmos-batch-atomic: false a failure still rolls back everything", async () => {
  const { container } = await newContainer();
  const { result } = await container.items.batch(
    [
      { operationType: BulkOperationType.Create, partitionKey: "same", resourceBody: { id: "x1", pk: "same" } },
      { operationType: BulkOperationType.Read, id: "absent" },
    ],
    "same",
  );
  assert.deepEqual(
    result.map((o) => o.statusCode),
    [424, 404],
  );
  assert.equal((await container.item("x1", "same").read()).statusCode, 404);
});

test("bulk under --replica-lag: its writes reach the secondaries late like any write; the SDK with Session reads them through the bulk's token", async (t) => {
  const rsrv = await startCosmolite(t, { partitions: 2, args: ["--replica-lag", "600000", "--replica-wait", "200"] });
  const { database: db } = await rsrv.client({ consistencyLevel: "Session" }).databases.create({ id: uid("db") });
  const { container: s } = await db.containers.create({ id: "c", partitionKey: "/pk" });
  // Written before the restart: the secondaries start caught up with it.
  await s.items.create({ id: "old", pk: "p-old", v: 1 });
  await rsrv.restart();
  const s2 = rsrv.client({ consistencyLevel: "Session" }).database(db.id).container("c");
  const p2 = rsrv.client().database(db.id).container("c");
  const results = await s2.items.executeBulkOperations([
    { operationType: BulkOperationType.Create, partitionKey: "p-new", resourceBody: { id: "new", pk: "p-new", v: 1 } },
    { operationType: BulkOperationType.Replace, id: "old", partitionKey: "p-old", resourceBody: { id: "old", pk: "p-old", v: 2 } },
    { operationType: BulkOperationType.Create, partitionKey: "p-old", resourceBody: { id: "old", pk: "p-old", v: 9 } }, // 409
  ]);
  assert.deepEqual(results.map(statusOf), [201, 200, 409]);
  assert.equal((await p2.item("new", "p-new").read()).statusCode, 404, "a secondary lacks the bulk's create");
  assert.equal((await p2.item("old", "p-old").read()).resource.v, 1, "and has the version before its replace");
  assert.equal((await s2.item("new", "p-new").read()).statusCode, 200, "Session reads its bulk's writes");
  assert.equal((await s2.item("old", "p-old").read()).resource.v, 2);
});
