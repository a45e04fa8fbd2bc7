// Transactional batch (PROTOCOL.md section 5) through the official SDK's
// container.items.batch and by raw HTTP: every operation type, one LSN for
// the whole batch (seen through the change feed's _lsn), all-or-nothing
// rollback (207, the culprit's status, 424 for the rest, nothing persisted,
// nothing in the change feed), the 100-operation and 2 MB limits, and
// operations aimed at another partition key.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { drainChangeFeed, httpCode as code, pkHeaders, rawRequest, show, uid, useContainer, userFields } from "./harness.mjs";

let srv, client, database, container, collId, docsPath;

useContainer((e) => ({ srv, client, database, container, collId, docsPath } = e));

function rawBatch(pk, ops, extraHeaders = {}) {
  return rawRequest(srv, {
    method: "POST",
    path: docsPath,
    headers: {
      "x-ms-cosmos-is-batch-request": "True",
      "x-ms-cosmos-batch-atomic": "True",
      ...(pk === null ? {} : pkHeaders(pk)),
      ...extraHeaders,
    },
    body: ops,
  });
}

/** A LatestVersion iterator for one partition key that has already been read up to now. */
async function feedFromNow(pk) {
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now(pk) });
  const first = await it.readNext();
  assert.equal(first.statusCode, 304, "Now starts idle");
  return it;
}

/** True when (pk, id) is stored. The SDK answers a missing item's read with statusCode 404, no throw. */
async function exists(id, pk) {
  const { statusCode } = await container.item(id, pk).read();
  assert.ok(statusCode === 200 || statusCode === 404, `read ${id}: status ${statusCode}`);
  return statusCode === 200;
}

test("success: Create, Upsert, Read, Replace (ifMatch), Delete, Patch (ifMatch) all apply, with their statuses", async () => {
  const pk = uid("ok");
  const { resource: r } = await container.items.create({ id: "r", pk, v: 1 });
  const { resource: rep } = await container.items.create({ id: "rep", pk, v: 1 });
  await container.items.create({ id: "del", pk, v: 1 });
  const { resource: pat } = await container.items.create({ id: "pat", pk, n: 1 });
  await container.items.create({ id: "ups-old", pk, v: 1 });
  const feed = await feedFromNow(pk);

  const res = await container.items.batch(
    [
      { operationType: "Create", resourceBody: { id: "c1", pk, v: 1 } },
      { operationType: "Upsert", resourceBody: { id: "u-new", pk, v: 1 } },
      { operationType: "Upsert", resourceBody: { id: "ups-old", pk, v: 2 } },
      { operationType: "Read", id: "r" },
      { operationType: "Replace", id: "rep", resourceBody: { id: "rep", pk, v: 2 }, ifMatch: rep._etag },
      { operationType: "Delete", id: "del" },
      { operationType: "Patch", id: "pat", resourceBody: { operations: [{ op: "incr", path: "/n", value: 5 }] }, ifMatch: pat._etag },
      { operationType: "Patch", id: "pat", resourceBody: { condition: "FROM c WHERE c.n = 6", operations: [{ op: "set", path: "/ok", value: true }] } },
      { operationType: "Create", resourceBody: { id: "c2", pk, v: 1 } },
    ],
    pk,
  );
  assert.equal(res.code, 200, `HTTP status of a successful batch: ${JSON.stringify(res.result)}`);
  const statuses = res.result.map((x) => x.statusCode);
  assert.deepEqual(statuses, [201, 201, 200, 200, 200, 204, 200, 200, 201], JSON.stringify(res.result));
  for (const [i, x] of res.result.entries()) {
    if (x.statusCode !== 204) {
      assert.match(String(x.eTag), /^".+"$/, `op ${i} carries its quoted eTag`);
      assert.equal(x.resourceBody?._etag, x.eTag, `op ${i}: resourceBody._etag equals eTag`);
    }
    assert.equal(typeof x.requestCharge, "number", `op ${i} has a requestCharge`);
  }
  assert.deepEqual(userFields(res.result[3].resourceBody), { id: "r", pk, v: 1 }, "Read returns the document");
  assert.equal(res.result[3].eTag, r._etag, "Read's eTag is the unchanged document's");
  assert.equal(res.result[7].resourceBody.n, 6, "the second patch sees the first");
  assert.equal(res.result[7].resourceBody.ok, true);

  // Persisted.
  assert.equal((await container.item("c1", pk).read()).resource.v, 1);
  assert.equal((await container.item("u-new", pk).read()).resource.v, 1);
  assert.equal((await container.item("ups-old", pk).read()).resource.v, 2);
  assert.equal((await container.item("rep", pk).read()).resource.v, 2);
  assert.equal(await exists("del", pk), false, "Delete applied");
  const p = (await container.item("pat", pk).read()).resource;
  assert.deepEqual([p.n, p.ok], [6, true]);

  // One LSN for the whole batch, never split across change-feed pages.
  const { items } = await drainChangeFeed(feed);
  assert.deepEqual(
    items.map((x) => x.id).sort(),
    ["c1", "c2", "pat", "rep", "u-new", "ups-old"],
    "every written document appears once; the read and the delete do not",
  );
  const lsns = new Set(items.map((x) => x._lsn));
  assert.equal(lsns.size, 1, `all writes of the batch share one _lsn: ${items.map((x) => `${x.id}:${x._lsn}`).join(" ")}`);
  const [batchLsn] = lsns;

  const small = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(pk), maxItemCount: 2 });
  const pages = [];
  for (;;) {
    const page = await small.readNext();
    if (page.statusCode === 304) break;
    pages.push(page.result);
    if (pages.length > 20) assert.fail("feed did not end");
  }
  const batchPage = pages.find((pg) => pg.some((x) => x._lsn === batchLsn));
  assert.equal(
    batchPage.filter((x) => x._lsn === batchLsn).length,
    6,
    "a page never splits one LSN (the batch's six documents come on one page even with maxItemCount 2)",
  );

  // The next single write gets a later LSN.
  await container.items.create({ id: "after", pk });
  const { items: tail } = await drainChangeFeed(feed);
  assert.ok(tail[0]._lsn > batchLsn, "LSNs keep ascending after a batch");
});

test("raw HTTP success: 200, a JSON array in op order, session token", async () => {
  const pk = uid("raw");
  const r = await rawBatch(pk, [
    { operationType: "Create", resourceBody: { id: "a", pk } },
    { operationType: "Upsert", resourceBody: { id: "b", pk }, partitionKey: JSON.stringify([pk]) },
    { operationType: "Read", id: "a" },
  ]);
  assert.equal(r.status, 200, show(r));
  assert.ok(Array.isArray(r.json), `the body is an array: ${r.text.slice(0, 200)}`);
  assert.deepEqual(r.json.map((x) => x.statusCode), [201, 201, 200]);
  assert.equal(r.json[2].resourceBody.id, "a", "a Read sees the Create before it in the same batch");
  assert.match(r.headers["x-ms-session-token"] ?? "", /^[^:]+:-1#\d+$/, "session token");
});

test("minimal answers: the SDK's contentResponseOnWriteEnabled=false (Prefer: return=minimal) and the per-op minimalReturnPreference", async () => {
  const pk = uid("min");
  await container.items.create({ id: "m-r", pk, v: 1 });
  const res = await container.items.batch(
    [
      { operationType: "Create", resourceBody: { id: "m-c", pk, v: 1 } },
      { operationType: "Patch", id: "m-r", resourceBody: { operations: [{ op: "incr", path: "/v", value: 1 }] } },
      { operationType: "Read", id: "m-r" },
    ],
    pk,
    { contentResponseOnWriteEnabled: false },
  );
  assert.equal(res.code, 200, JSON.stringify(res.result));
  assert.deepEqual(res.result.map((x) => x.statusCode), [201, 200, 200]);
  for (const [i, x] of res.result.entries()) assert.match(String(x.eTag), /^".+"$/, `op ${i} keeps its eTag`);
  assert.equal(res.result[0].resourceBody, undefined, "a minimal Create answers without the document");
  assert.equal(res.result[1].resourceBody, undefined, "a minimal Patch answers without the document");
  assert.equal(res.result[2].resourceBody?.v, 2, "a Read still returns its document");
  assert.equal((await container.item("m-c", pk).read()).resource.v, 1, "the minimal write applied");

  // The per-operation preference (how the Java SDK asks) applies to that operation only.
  const r = await rawBatch(pk, [
    { operationType: "Upsert", resourceBody: { id: "m-u", pk }, minimalReturnPreference: true },
    { operationType: "Upsert", resourceBody: { id: "m-w", pk } },
  ]);
  assert.equal(r.status, 200, show(r));
  assert.equal(r.json[0].resourceBody, undefined);
  assert.equal(r.json[1].resourceBody?.id, "m-w");
  const bad = await rawBatch(pk, [{ operationType: "Read", id: "m-r", minimalReturnPreference: "yes" }]);
  assert.equal(bad.status, 400, show(bad));
});

test("rollback: a failing op gives 207, its real status, 424 for every other; nothing persisted or fed", async () => {
  const pk = uid("rb");
  const { resource: keep } = await container.items.create({ id: "keep", pk, v: 1 });
  await container.items.create({ id: "dup", pk, v: 1 });
  const feed = await feedFromNow(pk);

  const cases = [
    {
      what: "Replace of a missing doc (404) in the middle",
      ops: [
        { operationType: "Create", resourceBody: { id: "n1", pk } },
        { operationType: "Delete", id: "keep" },
        { operationType: "Replace", id: "missing", resourceBody: { id: "missing", pk } },
        { operationType: "Upsert", resourceBody: { id: "n2", pk } },
      ],
      want: [424, 424, 404, 424],
    },
    {
      what: "Create of an existing doc (409) last",
      ops: [
        { operationType: "Upsert", resourceBody: { id: "keep", pk, v: 99 } },
        { operationType: "Patch", id: "keep", resourceBody: { operations: [{ op: "incr", path: "/v", value: 1 }] } },
        { operationType: "Create", resourceBody: { id: "dup", pk } },
      ],
      want: [424, 424, 409],
    },
    {
      what: "stale ifMatch (412) first",
      ops: [
        { operationType: "Replace", id: "keep", resourceBody: { id: "keep", pk, v: 5 }, ifMatch: '"not-the-etag"' },
        { operationType: "Create", resourceBody: { id: "n3", pk } },
      ],
      want: [412, 424],
    },
    {
      what: "a failing patch (400) after a delete",
      ops: [
        { operationType: "Delete", id: "dup" },
        { operationType: "Patch", id: "keep", resourceBody: { operations: [{ op: "remove", path: "/nope" }] } },
      ],
      want: [424, 400],
    },
    {
      what: "a false patch condition (412)",
      ops: [
        { operationType: "Create", resourceBody: { id: "n4", pk } },
        { operationType: "Patch", id: "keep", resourceBody: { condition: "FROM c WHERE c.v = 2", operations: [{ op: "set", path: "/v", value: 3 }] } },
      ],
      want: [424, 412],
    },
    {
      what: "a Read of a missing doc (404)",
      ops: [
        { operationType: "Create", resourceBody: { id: "n5", pk } },
        { operationType: "Read", id: "missing" },
      ],
      want: [424, 404],
    },
    {
      what: "two writes to the same new id (409 on the second)",
      ops: [
        { operationType: "Create", resourceBody: { id: "twice", pk } },
        { operationType: "Create", resourceBody: { id: "twice", pk } },
      ],
      want: [424, 409],
    },
  ];
  for (const c of cases) {
    const res = await container.items.batch(c.ops, pk);
    assert.equal(res.code, 207, `${c.what}: HTTP status ${res.code}, results ${JSON.stringify(res.result)}`);
    assert.deepEqual(res.result.map((x) => x.statusCode), c.want, `${c.what}: per-op statuses`);
  }
  for (const id of ["n1", "n2", "n3", "n4", "n5", "missing", "twice"]) assert.equal(await exists(id, pk), false, `${id} was not persisted`);
  const k = (await container.item("keep", pk).read()).resource;
  assert.deepEqual(k, keep, "keep is unchanged (not deleted, upserted, patched or replaced)");
  assert.equal(await exists("dup", pk), true, "dup was not deleted");
  const idle = await feed.readNext();
  assert.equal(idle.statusCode, 304, `failed batches leave nothing in the change feed: ${JSON.stringify(idle.result)}`);

  // The same shape by raw HTTP: status 207 and the array.
  const raw = await rawBatch(pk, cases[0].ops);
  assert.equal(raw.status, 207, show(raw));
  assert.deepEqual(raw.json.map((x) => x.statusCode), [424, 424, 404, 424]);
});

// What Azure says about a refused operation inside a batch (docs/operations.md,
// "What a parked record says"): the SDKs read statusCode, subStatusCode, eTag,
// resourceBody, requestCharge and retryAfterMilliseconds per result, and no
// message; the 207 has no error body of its own. sagafeed's parked records
// rely on exactly that shape, so cosmolite must not carry more or less.
test("a refused operation's result has Azure's fields only (no message), by SDK and raw HTTP", async () => {
  const pk = uid("words");
  await container.items.create({ id: "there", pk });
  const ops = [
    { operationType: "Create", resourceBody: { id: "fresh", pk } },
    { operationType: "Create", resourceBody: { id: "there", pk } },
  ];
  const known = new Set(["statusCode", "subStatusCode", "eTag", "resourceBody", "requestCharge", "retryAfterMilliseconds"]);
  const res = await container.items.batch(ops, pk);
  assert.equal(res.code, 207);
  assert.equal(res.result[1].statusCode, 409);
  const raw = await rawBatch(pk, ops);
  assert.equal(raw.status, 207, show(raw));
  assert.ok(Array.isArray(raw.json), `the 207's body is the result array: ${show(raw)}`);
  for (const r of raw.json) {
    for (const k of Object.keys(r)) assert.ok(known.has(k), `result field ${k} is not Azure's: ${JSON.stringify(r)}`);
    assert.equal(r.message, undefined);
  }
  assert.deepEqual(raw.json.map((x) => x.statusCode), [424, 409]);
});

test("limits: 100 operations are fine, 101 are 400, more than 2 MB is 413", async () => {
  const pk = uid("lim");
  const ops = (n, tag) => Array.from({ length: n }, (_, i) => ({ operationType: "Create", resourceBody: { id: `${tag}${i}`, pk } }));
  const ok = await container.items.batch(ops(100, "h"), pk);
  assert.equal(ok.code, 200);
  assert.equal(ok.result.length, 100);
  const { items } = await drainChangeFeed(container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(pk) }));
  assert.equal(items.length, 100);
  assert.equal(new Set(items.map((x) => x._lsn)).size, 1, "100 writes, one LSN");

  const tooMany = await rawBatch(pk, ops(101, "x"));
  assert.equal(tooMany.status, 400, `101 operations: ${show(tooMany)}`);
  assert.ok(tooMany.json && !Array.isArray(tooMany.json) && typeof tooMany.json.message === "string", "a whole-request error is an error object, not an array");
  assert.equal(await exists("x0", pk), false);

  // Three 800 KB documents: each is fine alone, the batch is > 2 MB (but under --max-request-bytes 4m).
  const big = "z".repeat(800 * 1024);
  const heavy = [0, 1, 2].map((i) => ({ operationType: "Create", resourceBody: { id: `big${i}`, pk, big } }));
  const tooBig = await rawBatch(pk, heavy);
  assert.equal(tooBig.status, 413, `a 2.4 MB batch: ${show(tooBig)}`);
  assert.equal(await exists("big0", pk), false);
  const twoOk = await rawBatch(pk, heavy.slice(0, 2));
  assert.equal(twoOk.status, 200, `a 1.6 MB batch is fine: HTTP ${twoOk.status} ${twoOk.text.slice(0, 200)}`);
});

test("an operation for another partition key fails with 400 and nothing is applied", async () => {
  const pk = uid("pk");
  // An explicit partitionKey on the operation that differs from the batch's.
  const viaField = await rawBatch(pk, [
    { operationType: "Create", resourceBody: { id: "f1", pk } },
    { operationType: "Create", resourceBody: { id: "f2", pk: "elsewhere" }, partitionKey: JSON.stringify(["elsewhere"]) },
  ]);
  const ok400 = (r, what) => {
    if (r.status === 400) return;
    assert.equal(r.status, 207, `${what}: expected 400 (or 207 with the op at 400): ${show(r)}`);
    assert.deepEqual(r.json.map((x) => x.statusCode), [424, 400], `${what}: per-op statuses`);
  };
  ok400(viaField, "explicit partitionKey");
  // A body whose partition key property differs from the batch's.
  const viaBody = await rawBatch(pk, [
    { operationType: "Upsert", resourceBody: { id: "f1", pk } },
    { operationType: "Upsert", resourceBody: { id: "f3", pk: "elsewhere" } },
  ]);
  ok400(viaBody, "resourceBody partition key");
  // Through the SDK.
  await assert.rejects(
    container.items.batch(
      [
        { operationType: "Create", resourceBody: { id: "f4", pk } },
        { operationType: "Create", partitionKey: "elsewhere", resourceBody: { id: "f5", pk: "elsewhere" } },
      ],
      pk,
    ).then((res) => {
      // A 207 with the operation at 400 is an acceptable way to refuse it.
      if (res.code === 207 && res.result[1]?.statusCode === 400) throw new Error("Batch request error: 207 with the operation at 400");
      return res;
    }),
    // The SDK wraps a whole-request error as "Batch request error: <message>" and drops the status.
    /Batch request error/,
  );
  for (const [id, k] of [["f1", pk], ["f2", "elsewhere"], ["f3", "elsewhere"], ["f4", pk], ["f5", "elsewhere"]]) {
    assert.equal(await exists(id, k), false, `${id} was not persisted`);
  }
});

test("malformed batches are 400: no partition key header, empty, not an array, bad operation", async () => {
  const pk = uid("bad");
  const noPk = await rawBatch(null, [{ operationType: "Create", resourceBody: { id: "a", pk } }]);
  assert.equal(noPk.status, 400, `no x-ms-documentdb-partitionkey: ${show(noPk)}`);
  for (const [what, body] of [
    ["empty array", []],
    ["an object", { operationType: "Create" }],
    ["unknown operationType", [{ operationType: "Explode", id: "a" }]],
    ["Create without resourceBody", [{ operationType: "Create" }]],
    ["Read without id", [{ operationType: "Read" }]],
    ["Replace with mismatched ids", [{ operationType: "Replace", id: "a", resourceBody: { id: "b", pk } }]],
  ]) {
    const r = await rawBatch(pk, body);
    const fine = r.status === 400 || (r.status === 207 && r.json.some((x) => x.statusCode === 400));
    assert.ok(fine, `${what}: expected 400: ${show(r)}`);
  }
  assert.equal(await exists("a", pk), false);
});
