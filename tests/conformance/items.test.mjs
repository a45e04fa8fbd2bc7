// Item CRUD, conflicts, ETag concurrency, system properties, awkward ids and
// partition key values, through the official SDK.
import assert from "node:assert/strict";
import { test } from "node:test";

import { httpCode as code, ridBytes, useDatabase, uid } from "./harness.mjs";

let srv;
let client;
let database;
let dbRid;

useDatabase(async (e) => {
  ({ srv, client, database } = e);
  dbRid = (await database.read()).resource._rid;
});

async function newContainer(pkPath = "/pk") {
  const { container, resource } = await database.containers.create({
    id: uid("coll"),
    partitionKey: { paths: [pkPath], kind: "Hash", version: 2 },
  });
  return { container, collRid: resource._rid };
}

function assertDocSystemProps(doc, collRid) {
  for (const p of ["_rid", "_self", "_etag", "_ts", "_attachments"]) {
    assert.ok(doc[p] !== undefined && doc[p] !== null, `document lacks ${p}: ${JSON.stringify(doc)}`);
  }
  assert.match(doc._etag, /^".+"$/, "_etag carries its double quotes");
  assert.ok(Number.isInteger(doc._ts), "_ts is integer epoch seconds");
  assert.ok(Math.abs(doc._ts - Date.now() / 1000) < 300, `_ts ${doc._ts} is not near now`);
  assert.equal(doc._attachments, "attachments/");
  const rb = ridBytes(doc._rid);
  assert.equal(rb.length, 16, `document _rid ${doc._rid} is 16 bytes`);
  assert.deepEqual(rb.subarray(0, 8), ridBytes(collRid), "document _rid starts with the container _rid");
  assert.equal(doc._self, `dbs/${dbRid}/colls/${collRid}/docs/${doc._rid}/`);
}

test("item CRUD: create, read, upsert (insert and replace), replace, delete", async () => {
  const { container, collRid } = await newContainer();
  const body = { id: "order-1", pk: "p1", state: "placed", lines: [{ sku: "a", qty: 2 }], nested: { x: 1.5, y: null } };

  const created = await container.items.create(body);
  assert.equal(created.statusCode, 201);
  const doc = created.resource;
  assert.equal(doc.id, "order-1");
  assert.equal(doc.state, "placed");
  assert.deepEqual(doc.lines, body.lines);
  assert.deepEqual(doc.nested, body.nested);
  assertDocSystemProps(doc, collRid);
  assert.equal(created.etag, doc._etag, "etag header equals _etag");

  const read = await container.item("order-1", "p1").read();
  assert.equal(read.statusCode, 200);
  assert.deepEqual(read.resource, doc, "read returns the stored document unchanged");
  assert.equal(read.etag, doc._etag);

  const ins = await container.items.upsert({ id: "order-2", pk: "p1", v: 1 });
  assert.equal(ins.statusCode, 201, "upsert of a new id creates (201)");
  const upd = await container.items.upsert({ id: "order-2", pk: "p1", v: 2 });
  assert.equal(upd.statusCode, 200, "upsert of an existing id replaces (200)");
  assert.equal(upd.resource.v, 2);
  assert.equal(upd.resource._rid, ins.resource._rid, "upsert-replace keeps the _rid");
  assert.notEqual(upd.resource._etag, ins.resource._etag, "every write yields a new _etag");

  const rep = await container.item("order-1", "p1").replace({ id: "order-1", pk: "p1", state: "paid" });
  assert.equal(rep.statusCode, 200);
  assert.equal(rep.resource.state, "paid");
  assert.equal(rep.resource.lines, undefined, "replace is a full replacement");
  assert.notEqual(rep.resource._etag, doc._etag);
  assert.ok(rep.resource._ts >= doc._ts);
  const reread = await container.item("order-1", "p1").read();
  assert.equal(reread.resource.state, "paid");

  const del = await container.item("order-1", "p1").delete();
  assert.equal(del.statusCode, 204);
  const gone = await container.item("order-1", "p1").read();
  assert.equal(gone.statusCode, 404, "a deleted item reads as 404");
  assert.equal(gone.resource, undefined);
  await assert.rejects(container.item("order-1", "p1").delete(), code(404));
  await assert.rejects(container.item("order-1", "p1").replace({ id: "order-1", pk: "p1" }), code(404));
});

test("read of a missing item answers 404 with substatus 0", async () => {
  const { container } = await newContainer();
  const r = await container.item("never-written", "p").read();
  assert.equal(r.statusCode, 404);
  assert.ok(!r.substatus, `substatus of a missing item is 0, got ${r.substatus}`);
  // Same id in another partition must not be found either.
  await container.items.create({ id: "x", pk: "a" });
  assert.equal((await container.item("x", "b").read()).statusCode, 404);
});

test("client-sent system properties are overwritten", async () => {
  const { container, collRid } = await newContainer();
  const { resource } = await container.items.create({
    id: "sys",
    pk: "p",
    _rid: "AAAAAAAAAAAAAAAAAAAAAA==",
    _etag: '"client"',
    _ts: 1,
    _self: "bogus",
  });
  assert.notEqual(resource._etag, '"client"');
  assert.notEqual(resource._ts, 1);
  assert.notEqual(resource._self, "bogus");
  assertDocSystemProps(resource, collRid);
});

test("409 on a duplicate id in the same logical partition, OK in another", async () => {
  const { container } = await newContainer();
  await container.items.create({ id: "dup", pk: "a", n: 1 });
  await assert.rejects(container.items.create({ id: "dup", pk: "a", n: 2 }), code(409));
  const other = await container.items.create({ id: "dup", pk: "b", n: 3 });
  assert.equal(other.statusCode, 201, "the same id in another logical partition is a different item");
  assert.equal((await container.item("dup", "a").read()).resource.n, 1, "the 409 left the original intact");
  assert.equal((await container.item("dup", "b").read()).resource.n, 3);
  // Deleting one leaves the other.
  await container.item("dup", "a").delete();
  assert.equal((await container.item("dup", "b").read()).statusCode, 200);
  // After delete, create works again.
  assert.equal((await container.items.create({ id: "dup", pk: "a", n: 4 })).statusCode, 201);
});

test("ETag races: IfMatch replace/upsert/delete with stale and fresh etags", async () => {
  const { container } = await newContainer();
  const v1 = (await container.items.create({ id: "e", pk: "p", v: 1 })).resource;
  const v2 = (
    await container.item("e", "p").replace({ id: "e", pk: "p", v: 2 }, { accessCondition: { type: "IfMatch", condition: v1._etag } })
  ).resource;
  assert.equal(v2.v, 2, "replace with the current etag succeeds");

  await assert.rejects(
    container.item("e", "p").replace({ id: "e", pk: "p", v: 3 }, { accessCondition: { type: "IfMatch", condition: v1._etag } }),
    code(412),
    "replace with a stale etag is 412",
  );
  await assert.rejects(
    container.items.upsert({ id: "e", pk: "p", v: 3 }, { accessCondition: { type: "IfMatch", condition: v1._etag } }),
    code(412),
    "upsert with a stale etag is 412",
  );
  await assert.rejects(
    container.item("e", "p").delete({ accessCondition: { type: "IfMatch", condition: v1._etag } }),
    code(412),
    "delete with a stale etag is 412",
  );
  assert.equal((await container.item("e", "p").read()).resource.v, 2, "failed preconditions changed nothing");

  // Two writers race from the same read: exactly one wins.
  const results = await Promise.allSettled(
    [10, 11].map((v) =>
      container.item("e", "p").replace({ id: "e", pk: "p", v }, { accessCondition: { type: "IfMatch", condition: v2._etag } }),
    ),
  );
  const ok = results.filter((r) => r.status === "fulfilled");
  const lost = results.filter((r) => r.status === "rejected");
  assert.equal(ok.length, 1, "exactly one racing replace wins");
  assert.equal(lost[0].reason.code, 412);
  const winner = ok[0].value.resource;

  const del = await container.item("e", "p").delete({ accessCondition: { type: "IfMatch", condition: winner._etag } });
  assert.equal(del.statusCode, 204, "delete with the current etag succeeds");
});

test("read with IfNoneMatch: 304 for the current etag, 200 after a change", async () => {
  const { container } = await newContainer();
  const v1 = (await container.items.create({ id: "n", pk: "p", v: 1 })).resource;
  const same = await container.item("n", "p").read({ accessCondition: { type: "IfNoneMatch", condition: v1._etag } });
  assert.equal(same.statusCode, 304, "unchanged item with If-None-Match: current etag is 304");
  assert.ok(!same.resource, "304 has no body");
  await container.item("n", "p").replace({ id: "n", pk: "p", v: 2 });
  const changed = await container.item("n", "p").read({ accessCondition: { type: "IfNoneMatch", condition: v1._etag } });
  assert.equal(changed.statusCode, 200);
  assert.equal(changed.resource.v, 2);
});

const awkwardIds = [
  "with space",
  "inner  two  spaces",
  'double"quote',
  "single'quote",
  "unicode-ünïcødé-中文-😀",
  "percent%sign",
  "percent%20encoded-looking",
  "plus+sign",
  "amp&ersand",
  "equals=sign",
  "all %+&=\"' together",
  "semi;colon,comma:colon@at",
  "tilde~bang!star*paren()",
];

test("awkward ids round-trip through create, read, replace, delete", async () => {
  const { container } = await newContainer();
  for (const id of awkwardIds) {
    const c = await container.items.create({ id, pk: "p", v: 1 });
    assert.equal(c.statusCode, 201, `create ${JSON.stringify(id)}`);
    assert.equal(c.resource.id, id);
    const r = await container.item(id, "p").read();
    assert.equal(r.statusCode, 200, `read ${JSON.stringify(id)}`);
    assert.equal(r.resource.id, id);
    const rep = await container.item(id, "p").replace({ id, pk: "p", v: 2 });
    assert.equal(rep.resource.v, 2, `replace ${JSON.stringify(id)}`);
    const ifm = await container
      .item(id, "p")
      .replace({ id, pk: "p", v: 3 }, { accessCondition: { type: "IfMatch", condition: rep.resource._etag } });
    assert.equal(ifm.resource.v, 3);
  }
  // Ids that look alike are distinct items.
  assert.equal((await container.item("percent%20encoded-looking", "p").read()).resource.v, 3);
  assert.equal((await container.item("percent encoded-looking", "p").read()).statusCode, 404);
  assert.equal((await container.item("plus sign", "p").read()).statusCode, 404, "'+' is not a space");
  for (const id of awkwardIds) {
    const d = await container.item(id, "p").delete();
    assert.equal(d.statusCode, 204, `delete ${JSON.stringify(id)}`);
    assert.equal((await container.item(id, "p").read()).statusCode, 404);
  }
});

test("ids with ? or a trailing space are rejected with 400", async () => {
  // The SDK itself refuses ids with / \ # before sending anything (raw_http
  // covers the server side of those); "?" and a trailing space reach the server.
  const { container } = await newContainer();
  await assert.rejects(container.items.create({ id: "a?b", pk: "p" }), code(400), "an id must not contain ?");
  await assert.rejects(container.items.upsert({ id: "a?b", pk: "p" }), code(400), "an id must not contain ?");
  await assert.rejects(container.items.create({ id: "trailing ", pk: "p" }), code(400), "an id must not end with a space");
  await assert.rejects(container.items.create({ id: "x".repeat(1024), pk: "p" }), code(400), "an id is at most 1023 bytes");
  const ok = await container.items.create({ id: "y".repeat(1023), pk: "p" });
  assert.equal(ok.statusCode, 201, "a 1023-byte id is fine");
  assert.equal((await container.item("y".repeat(1023), "p").read()).statusCode, 200);
});

const pkValues = [
  ["string", "tenant-1"],
  ["empty string", ""],
  ["unicode string", "ünï-中文-😀"],
  ["integer", 42],
  ["zero", 0],
  ["negative float", -3.25],
  ["true", true],
  ["false", false],
  ["null", null],
  ["missing", undefined],
];

test("partition key values of every JSON kind are stored and read back by the same key", async () => {
  const { container } = await newContainer();
  for (const [name, v] of pkValues) {
    const body = { id: "same-id", kind: name };
    if (v !== undefined) body.pk = v;
    const c = await container.items.create(body);
    assert.equal(c.statusCode, 201, `create with pk ${name}`);
  }
  for (const [name, v] of pkValues) {
    const r = await container.item("same-id", v).read();
    assert.equal(r.statusCode, 200, `read with pk ${name}`);
    assert.equal(r.resource.kind, name, `pk ${name} reads its own item`);
    if (v === undefined) assert.ok(!("pk" in r.resource), "missing pk stays missing");
    else assert.deepEqual(r.resource.pk, v);
  }
  // Distinct logical partitions: "1" vs 1, "true" vs true, "null" vs null.
  await container.items.create({ id: "t", pk: "1" });
  await container.items.create({ id: "t", pk: 1 });
  await container.items.create({ id: "t", pk: "true" });
  await container.items.create({ id: "t", pk: true });
  await container.items.create({ id: "t", pk: "null" });
  await container.items.create({ id: "t", pk: null });
  await container.items.create({ id: "t" });
  // Update and delete per key.
  for (const [name, v] of pkValues) {
    const rep = await container.item("same-id", v).replace(v === undefined ? { id: "same-id", kind: name, v: 2 } : { id: "same-id", pk: v, kind: name, v: 2 });
    assert.equal(rep.resource.v, 2, `replace with pk ${name}`);
  }
  for (const [name, v] of pkValues) {
    assert.equal((await container.item("same-id", v).delete()).statusCode, 204, `delete with pk ${name}`);
  }
  for (const [name, v] of pkValues) {
    assert.equal((await container.item("same-id", v).read()).statusCode, 404, `deleted with pk ${name}`);
  }
  assert.equal((await container.item("t", null).read()).resource.pk, null);
  assert.equal((await container.item("t", undefined).read()).resource.pk, undefined);
});

test("nested partition key path", async () => {
  const { container } = await newContainer("/tenant/region");
  await container.items.create({ id: "n1", tenant: { region: "eu" }, v: 1 });
  await container.items.create({ id: "n1", tenant: { region: "us" }, v: 2 });
  await container.items.create({ id: "n1", tenant: {}, v: 3 });
  assert.equal((await container.item("n1", "eu").read()).resource.v, 1);
  assert.equal((await container.item("n1", "us").read()).resource.v, 2);
  assert.equal((await container.item("n1", undefined).read()).resource.v, 3);
});

test("large documents: 1.5 MB accepted, over 2 MB rejected with 413", async () => {
  const { container } = await newContainer();
  const big = { id: "big", pk: "p", blob: "x".repeat(1_500_000) };
  const c = await container.items.create(big);
  assert.equal(c.statusCode, 201);
  const r = await container.item("big", "p").read();
  assert.equal(r.resource.blob.length, 1_500_000);
  await assert.rejects(container.items.create({ id: "huge", pk: "p", blob: "x".repeat(2 * 1024 * 1024 + 10) }), code(413));
});

test("many items and concurrent writers in one partition keep every write", async () => {
  const { container } = await newContainer();
  const n = 50;
  await Promise.all(Array.from({ length: n }, (_, i) => container.items.create({ id: `c${i}`, pk: "hot", i })));
  for (let i = 0; i < n; i++) {
    const r = await container.item(`c${i}`, "hot").read();
    assert.equal(r.resource.i, i);
  }
});
