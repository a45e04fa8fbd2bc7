// Server-side scripts through the official SDK: stored procedures, triggers
// and user-defined functions are created, read, listed, replaced and deleted
// like any resource. Executing them: sprocs.test.mjs.
import assert from "node:assert/strict";
import { test } from "node:test";

import { TriggerOperation, TriggerType } from "@azure/cosmos";

import { httpCode as code, rawRequest, show, useDatabase, uid } from "./harness.mjs";

let srv, client, database;
useDatabase((e) => ({ srv, client, database } = e));

async function newContainer() {
  const { container } = await database.containers.create({ id: uid("coll"), partitionKey: "/pk" });
  return container;
}

const KINDS = [
  {
    name: "stored procedures",
    seg: "sprocs",
    feed: (c) => c.scripts.storedProcedures,
    one: (c, id) => c.scripts.storedProcedure(id),
    def: (id, v) => ({ id, body: `function () { getContext().getResponse().setBody(${v}); }` }),
  },
  {
    name: "triggers",
    seg: "triggers",
    feed: (c) => c.scripts.triggers,
    one: (c, id) => c.scripts.trigger(id),
    def: (id, v) => ({ id, body: `function () { var x = ${v}; }`, triggerType: TriggerType.Pre, triggerOperation: TriggerOperation.Create }),
  },
  {
    name: "user-defined functions",
    seg: "udfs",
    feed: (c) => c.scripts.userDefinedFunctions,
    one: (c, id) => c.scripts.userDefinedFunction(id),
    def: (id, v) => ({ id, body: `function (x) { return x * ${v}; }` }),
  },
];

function checkScript(res, want, what) {
  for (const k of Object.keys(want)) assert.deepEqual(res[k], want[k], `${what}: ${k}`);
  for (const p of ["_rid", "_self", "_etag", "_ts"]) assert.ok(res[p] !== undefined && res[p] !== null, `${what}: has ${p}: ${JSON.stringify(res)}`);
  assert.match(res._etag, /^".+"$/, `${what}: _etag is quoted`);
}

for (const kind of KINDS) {
  test(`${kind.name}: create, read, list, replace, delete`, async () => {
    const container = await newContainer();
    const a = kind.def("alpha", 1);
    const b = kind.def("beta", 2);
    const created = await kind.feed(container).create(a);
    assert.equal(created.statusCode, 201);
    checkScript(created.resource, a, "create");
    assert.equal(created.etag, created.resource._etag, "etag header equals _etag");
    await kind.feed(container).create(b);

    const read = await kind.one(container, "alpha").read();
    assert.equal(read.statusCode, 200);
    checkScript(read.resource, a, "read");
    assert.equal(read.resource._etag, created.resource._etag);

    const { resources } = await kind.feed(container).readAll().fetchAll();
    assert.deepEqual(resources.map((r) => r.id).sort(), ["alpha", "beta"], "the list holds both");
    for (const r of resources) checkScript(r, r.id === "alpha" ? a : b, `list entry ${r.id}`);

    const a2 = kind.def("alpha", 3);
    const replaced = await kind.one(container, "alpha").replace(a2);
    assert.equal(replaced.statusCode, 200);
    checkScript(replaced.resource, a2, "replace");
    assert.notEqual(replaced.resource._etag, created.resource._etag, "a replace yields a new etag");
    checkScript((await kind.one(container, "alpha").read()).resource, a2, "read after replace");

    const del = await kind.one(container, "alpha").delete();
    assert.equal(del.statusCode, 204);
    await assert.rejects(kind.one(container, "alpha").read(), code(404), "read after delete");
    const after = (await kind.feed(container).readAll().fetchAll()).resources;
    assert.deepEqual(after.map((r) => r.id), ["beta"]);
  });

  test(`${kind.name}: 409 on a duplicate id, 404 on missing ones, 400 on a bad body`, async () => {
    const container = await newContainer();
    await kind.feed(container).create(kind.def("dup", 1));
    await assert.rejects(kind.feed(container).create(kind.def("dup", 2)), code(409));
    await assert.rejects(kind.one(container, "missing").read(), code(404));
    await assert.rejects(kind.one(container, "missing").replace(kind.def("missing", 1)), code(404));
    await assert.rejects(kind.one(container, "missing").delete(), code(404));
    const path = `/dbs/${database.id}/colls/${container.id}/${kind.seg}`;
    for (const body of [{ id: "nobody" }, { body: "function () {}" }, { id: "numbody", body: 5 }]) {
      const r = await rawRequest(srv, { method: "POST", path, body });
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${show(r)}`);
    }
    // Other containers do not see them; a missing container is 404.
    const other = await newContainer();
    assert.deepEqual((await kind.feed(other).readAll().fetchAll()).resources, []);
    const gone = await rawRequest(srv, { path: `/dbs/${database.id}/colls/no-such-coll/${kind.seg}` });
    assert.equal(gone.status, 404, show(gone));
  });
}

test("deleting a container removes its scripts", async () => {
  const container = await newContainer();
  await container.scripts.storedProcedures.create({ id: "s", body: "function () {}" });
  await container.scripts.userDefinedFunctions.create({ id: "u", body: "function () {}" });
  await container.delete();
  const { container: again } = await database.containers.create({ id: container.id, partitionKey: "/pk" });
  assert.deepEqual((await again.scripts.storedProcedures.readAll().fetchAll()).resources, [], "a recreated container starts empty");
  assert.deepEqual((await again.scripts.userDefinedFunctions.readAll().fetchAll()).resources, []);
});
