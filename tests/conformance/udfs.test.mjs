// User-defined functions in queries (docs/azure-scripts.md), refereed by the
// official SDK: udf.name(...) in SELECT and WHERE through items.query.
import assert from "node:assert/strict";
import { test } from "node:test";

import { httpCode as code, newContainer, useDatabase } from "./harness.mjs";

let database;
useDatabase((e) => ({ database } = e));

async function withUdfs() {
  const { container } = await newContainer(database);
  await container.scripts.userDefinedFunctions.create({ id: "tax", body: "function tax(x) { return Math.round(x * 0.2 * 100) / 100; }" });
  await container.scripts.userDefinedFunctions.create({ id: "fails", body: "function (x) { if (x > 1) throw new Error('too big: ' + x); return x; }" });
  await container.scripts.userDefinedFunctions.create({ id: "kind", body: "function (x) { return typeof x; }" });
  await container.scripts.userDefinedFunctions.create({ id: "spin", body: "function () { for (;;) {} }" });
  for (let i = 1; i <= 3; i++) await container.items.create({ id: `o${i}`, pk: `p${i}`, total: i * 10 });
  return container;
}

test("udf.tax in SELECT and in WHERE, in one partition and across them", async () => {
  const container = await withUdfs();
  const all = await container.items.query("SELECT c.id, udf.tax(c.total) AS tax FROM c").fetchAll();
  assert.deepEqual(all.resources.sort((a, b) => a.id.localeCompare(b.id)), [
    { id: "o1", tax: 2 },
    { id: "o2", tax: 4 },
    { id: "o3", tax: 6 },
  ]);
  const where = await container.items.query({ query: "SELECT VALUE c.id FROM c WHERE udf.tax(c.total) > @min", parameters: [{ name: "@min", value: 3 }] }).fetchAll();
  assert.deepEqual(where.resources.sort(), ["o2", "o3"]);
  const one = await container.items.query("SELECT VALUE udf.tax(c.total) FROM c", { partitionKey: "p3" }).fetchAll();
  assert.deepEqual(one.resources, [6]);
  // Undefined in, undefined out: the row drops the field, as for built-in functions.
  const kinds = await container.items.query("SELECT VALUE [udf.kind(c.missing), udf.kind(c.total), udf.kind(c)] FROM c WHERE c.id = 'o1'").fetchAll();
  assert.deepEqual(kinds.resources, [["undefined", "number", "object"]], "arguments arrive as their JSON types, a missing one as undefined");
});

test("a UDF's error, an unknown UDF and a runaway UDF fail the query", async () => {
  const container = await withUdfs();
  await assert.rejects(container.items.query("SELECT VALUE udf.fails(c.total) FROM c").fetchAll(), (e) => {
    code(400)(e);
    assert.match(e.message, /too big/);
    return true;
  });
  await assert.rejects(container.items.query("SELECT VALUE udf.nope(c.total) FROM c").fetchAll(), code(400));
  await assert.rejects(container.items.query("SELECT VALUE udf.spin() FROM c", { partitionKey: "p1" }).fetchAll(), (e) => e.code === 408 || e.code === 400);
  // The UDFs are still there and the server serves on.
  const ok = await container.items.query("SELECT VALUE udf.tax(10) FROM c", { partitionKey: "p1" }).fetchAll();
  assert.deepEqual(ok.resources, [2]);
});
