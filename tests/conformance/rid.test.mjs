// RID-based addressing (issue 15, behaviour 8): every resource answers at its
// _self link (dbs/<dbRid>/colls/<collRid>/docs/<docRid>), signed as the SDKs
// sign a RID link (the last _rid, lowercased), and such a request resolves
// only to the resource whose _rid it is: never to one whose name equals the
// _rid, never across containers or databases, never with a signature made
// for another resource.
import assert from "node:assert/strict";
import { test } from "node:test";

import { rawRequest, resourceFor, show, useDatabase, uid } from "./harness.mjs";

let srv, client, database;
useDatabase((e) => ({ srv, client, database } = e));

const trim = (link) => link.replace(/^\/+|\/+$/g, "");

/** The RID-form resource link of a path of _rids: the last _rid, lowercased. */
function ridLink(path) {
  const segs = trim(path).split("/");
  const upto = segs.length % 2 === 0 ? segs.length : segs.length - 1;
  return upto === 0 ? "" : segs[upto - 1].toLowerCase();
}

/** A request on a path of _rids, signed over the RID form (or over signedFor's, to forge). */
function ridRequest(path, { method = "GET", headers = {}, body, signedFor } = {}) {
  const p = trim(path);
  return rawRequest(srv, {
    method,
    path: `/${p}`,
    headers,
    body,
    sign: { resourceType: resourceFor(p).resourceType, resourceLink: ridLink(signedFor ?? p) },
  });
}

async function newContainer(db = database) {
  const { container, resource } = await db.containers.create({ id: uid("coll"), partitionKey: "/pk" });
  return { container, coll: resource };
}

test("every resource reads back at its _self link, signed over the RID form", async () => {
  const { resource: db } = await database.read();
  const { container, coll } = await newContainer();
  const { resource: doc } = await container.items.create({ id: "a", pk: "p1", v: 1 });
  const { resource: sproc } = await container.scripts.storedProcedures.create({ id: "sp", body: "function () {}" });
  assert.equal(trim(doc._self), `dbs/${db._rid}/colls/${coll._rid}/docs/${doc._rid}`, "the _self link is all _rids");

  for (const [what, res] of [["database", db], ["container", coll], ["document", doc], ["stored procedure", sproc]]) {
    const r = await ridRequest(res._self, { headers: what === "document" ? { "x-ms-documentdb-partitionkey": '["p1"]' } : {} });
    assert.equal(r.status, 200, `${what} at ${res._self}: ${show(r)}`);
    assert.equal(r.json._rid, res._rid, `${what}: the resource whose _rid it is`);
    assert.equal(r.json.id, res.id);
  }
  const noPk = await ridRequest(doc._self);
  assert.equal(noPk.status, 200, `a document's _self needs no partition key header: ${show(noPk)}`);
  assert.equal(noPk.json._rid, doc._rid);

  const colls = await ridRequest(`${trim(db._self)}/colls`);
  assert.equal(colls.status, 200, show(colls));
  assert.ok(colls.json.DocumentCollections.some((c) => c._rid === coll._rid), "the database's container feed");
  const docs = await ridRequest(`${trim(coll._self)}/docs`);
  assert.equal(docs.status, 200, show(docs));
  assert.deepEqual(docs.json.Documents.map((d) => d._rid), [doc._rid], "the container's document feed");
  const pkr = await ridRequest(`${trim(coll._self)}/pkranges`);
  assert.equal(pkr.status, 200, show(pkr));
  assert.equal(pkr.json.PartitionKeyRanges.length, 1);
  const q = await ridRequest(`${trim(coll._self)}/docs`, {
    method: "POST",
    headers: { "content-type": "application/query+json", "x-ms-documentdb-isquery": "True", "x-ms-documentdb-query-enablecrosspartition": "True" },
    body: { query: "SELECT * FROM c WHERE c.v = 1" },
  });
  assert.equal(q.status, 200, show(q));
  assert.deepEqual(q.json.Documents.map((d) => d.id), ["a"], "a query on the RID-form feed");
});

test("writes at RID links: create in the container's _self, replace and delete at the document's", async () => {
  const { container, coll } = await newContainer();
  const created = await ridRequest(`${trim(coll._self)}/docs`, { method: "POST", headers: { "x-ms-documentdb-partitionkey": '["p"]' }, body: { id: "w", pk: "p", v: 1 } });
  assert.equal(created.status, 201, show(created));
  const self = created.json._self;
  const replaced = await ridRequest(self, { method: "PUT", headers: { "x-ms-documentdb-partitionkey": '["p"]' }, body: { id: "w", pk: "p", v: 2 } });
  assert.equal(replaced.status, 200, show(replaced));
  assert.equal(replaced.json._rid, created.json._rid, "a replace keeps the _rid");
  assert.equal((await container.item("w", "p").read()).resource.v, 2, "the SDK reads the replaced document by name");
  const deleted = await ridRequest(self, { method: "DELETE" });
  assert.equal(deleted.status, 204, show(deleted));
  assert.equal((await container.item("w", "p").read()).statusCode, 404, "gone by name too");
  const again = await ridRequest(self);
  assert.equal(again.status, 404, `a deleted document's _self: ${show(again)}`);
});

test("a RID link resolves only to the resource whose _rid it is", async () => {
  const { container: c1, coll: coll1 } = await newContainer();
  const { container: c2, coll: coll2 } = await newContainer();
  const { resource: d1 } = await c1.items.create({ id: "x", pk: "p", v: 1 });
  const { resource: d2 } = await c2.items.create({ id: "x", pk: "p", v: 2 });
  const { resource: db } = await database.read();

  // Another container's document _rid under this container's _rid.
  const cross = await ridRequest(`dbs/${db._rid}/colls/${coll2._rid}/docs/${d1._rid}`);
  assert.equal(cross.status, 404, `a document _rid from another container: ${show(cross)}`);
  // A container _rid under another database's _rid.
  const { database: other } = await client.databases.create({ id: uid("other") });
  const { resource: otherDb } = await other.read();
  const wrongDb = await ridRequest(`dbs/${otherDb._rid}/colls/${coll1._rid}`);
  assert.equal(wrongDb.status, 404, `a container _rid under another database: ${show(wrongDb)}`);
  // A signature made for one document's RID link does not open another's.
  const forged = await ridRequest(d2._self, { signedFor: d1._self });
  assert.equal(forged.status, 401, `a token for ${d1._rid} on ${d2._rid}: ${show(forged)}`);
  // A partition key header naming another partition: the _rid is not there.
  const wrongPk = await ridRequest(d1._self, { headers: { "x-ms-documentdb-partitionkey": '["q"]' } });
  assert.equal(wrongPk.status, 404, `another partition: ${show(wrongPk)}`);

  // A document named like another document's _rid: the RID link reaches the _rid's owner,
  // the name link the named one.
  await c1.items.create({ id: d1._rid, pk: "p", v: 3 });
  const byRid = await ridRequest(d1._self, { headers: { "x-ms-documentdb-partitionkey": '["p"]' } });
  assert.equal(byRid.status, 200, show(byRid));
  assert.equal(byRid.json.v, 1, "the RID link reaches the document whose _rid it is");
  const byName = await c1.item(d1._rid, "p").read();
  assert.equal(byName.resource.v, 3, "the name link reaches the document named so");

  // A database named like another database's _rid, likewise.
  const { database: twin } = await client.databases.create({ id: db._rid });
  const ridDb = await ridRequest(db._self);
  assert.equal(ridDb.status, 200, show(ridDb));
  assert.equal(ridDb.json.id, database.id, "RID form: the database whose _rid it is");
  const nameDb = await rawRequest(srv, { path: `/dbs/${encodeURIComponent(db._rid)}` });
  assert.equal(nameDb.status, 200, show(nameDb));
  assert.equal(nameDb.json.id, db._rid, "name form: the database named so");
  await twin.delete();
  await other.delete();
});
