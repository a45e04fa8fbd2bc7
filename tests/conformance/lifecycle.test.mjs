// Database and container lifecycle through the official SDK.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { httpCode as code, ridBytes, startCosmolite, uid } from "./harness.mjs";

let srv;
let client;

before(async () => {
  srv = await startCosmolite(null);
  client = srv.client();
});
after(async () => {
  await srv?.stop();
});

function assertSystemProps(r, what) {
  for (const p of ["_rid", "_self", "_etag", "_ts"]) {
    assert.ok(r[p] !== undefined && r[p] !== null, `${what} lacks ${p}: ${JSON.stringify(r)}`);
  }
  assert.equal(typeof r._ts, "number", `${what}._ts must be a number`);
  assert.ok(Number.isInteger(r._ts), `${what}._ts must be integer epoch seconds`);
  assert.ok(Math.abs(r._ts - Date.now() / 1000) < 300, `${what}._ts ${r._ts} is not near now`);
  assert.match(r._etag, /^".+"$/, `${what}._etag must carry its double quotes`);
}

test("database: create, duplicate 409, read, createIfNotExists, readAll, delete", async () => {
  const id = uid("db");
  const created = await client.databases.create({ id });
  assert.equal(created.statusCode, 201);
  assert.equal(created.resource.id, id);
  assertSystemProps(created.resource, "database");
  assert.equal(ridBytes(created.resource._rid).length, 4, "a database _rid is 4 bytes");

  await assert.rejects(client.databases.create({ id }), code(409));

  const read = await client.database(id).read();
  assert.equal(read.statusCode, 200);
  assert.equal(read.resource.id, id);
  assert.equal(read.resource._rid, created.resource._rid);

  const again = await client.databases.createIfNotExists({ id });
  assert.equal(again.statusCode, 200, "createIfNotExists on an existing database reads it");
  assert.equal(again.resource._rid, created.resource._rid);

  const id2 = uid("db");
  const fresh = await client.databases.createIfNotExists({ id: id2 });
  assert.equal(fresh.statusCode, 201, "createIfNotExists on a missing database creates it");

  const all = await client.databases.readAll().fetchAll();
  const ids = all.resources.map((d) => d.id);
  assert.ok(ids.includes(id) && ids.includes(id2), `readAll lists both: ${ids}`);

  const del = await client.database(id).delete();
  assert.equal(del.statusCode, 204);
  await assert.rejects(client.database(id).read(), code(404));
  await assert.rejects(client.database(id).delete(), code(404));
  const after2 = (await client.databases.readAll().fetchAll()).resources.map((d) => d.id);
  assert.ok(!after2.includes(id), "a deleted database is not listed");
  assert.ok(after2.includes(id2));
  await client.database(id2).delete();
});

test("container: create, duplicate 409, read, createIfNotExists, readAll, replace, delete", async () => {
  const { database } = await client.databases.createIfNotExists({ id: uid("db") });
  const id = uid("coll");
  const created = await database.containers.create({
    id,
    partitionKey: { paths: ["/pk"], kind: "Hash", version: 2 },
  });
  assert.equal(created.statusCode, 201);
  const c = created.resource;
  assert.equal(c.id, id);
  assertSystemProps(c, "container");
  assert.deepEqual(c.partitionKey.paths, ["/pk"]);
  assert.equal(c.partitionKey.kind, "Hash");
  assert.ok(c.indexingPolicy && typeof c.indexingPolicy === "object", "container has an indexingPolicy");
  // PROTOCOL.md section 2: container _rid = database 4 bytes + 4 bytes, high bit set.
  const dbRid = (await database.read()).resource._rid;
  const cr = ridBytes(c._rid);
  assert.equal(cr.length, 8, `container _rid ${c._rid} must be 8 bytes`);
  assert.deepEqual(cr.subarray(0, 4), ridBytes(dbRid), "container _rid starts with the database _rid");
  assert.ok(cr[4] & 0x80, "container _rid byte 4 has its high bit set");
  assert.equal(c._self, `dbs/${dbRid}/colls/${c._rid}/`);

  await assert.rejects(database.containers.create({ id, partitionKey: "/pk" }), code(409));

  const read = await database.container(id).read();
  assert.equal(read.statusCode, 200);
  assert.equal(read.resource._rid, c._rid);
  assert.deepEqual(read.resource.partitionKey.paths, ["/pk"]);

  const again = await database.containers.createIfNotExists({ id, partitionKey: "/pk" });
  assert.equal(again.statusCode, 200);
  assert.equal(again.resource._rid, c._rid);

  // String shorthand for the partition key path.
  const id2 = uid("coll");
  const fresh = await database.containers.createIfNotExists({ id: id2, partitionKey: "/tenant" });
  assert.equal(fresh.statusCode, 201);
  assert.deepEqual(fresh.resource.partitionKey.paths, ["/tenant"]);
  assert.notEqual(fresh.resource._rid, c._rid);

  const all = await database.containers.readAll().fetchAll();
  const ids = all.resources.map((x) => x.id).sort();
  assert.deepEqual(ids, [id, id2].sort());

  const replaced = await database.container(id).replace({
    id,
    partitionKey: { paths: ["/pk"], kind: "Hash", version: 2 },
    defaultTtl: 3600,
  });
  assert.equal(replaced.statusCode, 200);
  assert.equal(replaced.resource.defaultTtl, 3600);
  assert.equal(replaced.resource._rid, c._rid, "replace keeps the _rid");
  assert.notEqual(replaced.resource._etag, c._etag, "replace changes the _etag");
  const reread = await database.container(id).read();
  assert.equal(reread.resource.defaultTtl, 3600);

  await assert.rejects(
    database.container(id).replace({ id, partitionKey: { paths: ["/other"], kind: "Hash", version: 2 } }),
    code(400),
    "the partition key of a container cannot change",
  );

  const del = await database.container(id).delete();
  assert.equal(del.statusCode, 204);
  await assert.rejects(database.container(id).read(), code(404));
  await assert.rejects(database.container(id).delete(), code(404));
  const left = (await database.containers.readAll().fetchAll()).resources.map((x) => x.id);
  assert.deepEqual(left, [id2]);
  await database.delete();
});

test("database and container responses carry an etag header equal to _etag", async () => {
  const id = uid("db");
  const db = await client.databases.create({ id });
  assert.equal(db.etag, db.resource._etag, "database create: etag header");
  const dbRead = await client.database(id).read();
  assert.equal(dbRead.etag, dbRead.resource._etag, "database read: etag header");
  const coll = await db.database.containers.create({ id: "c", partitionKey: "/pk" });
  assert.equal(coll.etag, coll.resource._etag, "container create: etag header");
  const collRead = await db.database.container("c").read();
  assert.equal(collRead.etag, collRead.resource._etag, "container read: etag header");
  await db.database.delete();
});

// cosmolite does not run queries over the container feed yet (400 "Queries over
// containers are not supported yet."); the test stays so it turns green when it does.
test("container: a query over containers finds one by id", { todo: "cosmolite lacks queries over containers" }, async () => {
  const { database } = await client.databases.createIfNotExists({ id: uid("db") });
  const a = uid("coll");
  const b = uid("coll");
  await database.containers.create({ id: a, partitionKey: "/pk" });
  await database.containers.create({ id: b, partitionKey: "/pk" });
  const { resources } = await database.containers
    .query({ query: "SELECT * FROM root r WHERE r.id = @id", parameters: [{ name: "@id", value: b }] })
    .fetchAll();
  assert.deepEqual(
    resources.map((r) => r.id),
    [b],
  );
  await database.delete();
});

test("deleting a database removes its containers and their documents", async () => {
  const dbId = uid("db");
  const { database } = await client.databases.create({ id: dbId });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  await container.items.create({ id: "doc", pk: "p" });
  await database.delete();
  await assert.rejects(client.database(dbId).container("c").read(), code(404));
  // Recreating the same names yields an empty, new container.
  const { database: db2 } = await client.databases.create({ id: dbId });
  const { container: c2 } = await db2.containers.create({ id: "c", partitionKey: "/pk" });
  const r = await c2.item("doc", "p").read();
  assert.equal(r.statusCode, 404, "a document must not survive its database's deletion");
  await db2.delete();
});

test("operations under a missing database or container answer 404", async () => {
  const ghostDb = client.database(uid("nodb"));
  await assert.rejects(ghostDb.containers.create({ id: "c", partitionKey: "/pk" }), code(404));
  const { database } = await client.databases.create({ id: uid("db") });
  const ghost = database.container(uid("nocoll"));
  await assert.rejects(ghost.read(), code(404));
  await assert.rejects(ghost.items.create({ id: "a", pk: "p" }), code(404));
  await database.delete();
});
