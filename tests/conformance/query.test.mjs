// Queries (PROTOCOL.md section 6) through the official SDK on a container
// with 4 partition key ranges, so every query without a partition key is a
// cross-partition query (query plan + one request per range): filters, the
// functions of issue 3, parameters, aggregates, ORDER BY, DISTINCT, TOP,
// OFFSET LIMIT, SELECT VALUE and projections, paging (fetchNext, fetchAll,
// continuation tokens), undefined versus null, and syntax errors by position.
// Expected results are computed here in JavaScript from the same documents.
import assert from "node:assert/strict";
import { test } from "node:test";

import { drainQuery, httpCode as code, pkHeaders, rawRequest, sdkEpk, show, useContainer, userFields } from "./harness.mjs";

const PARTITIONS = 4;
let srv, client, database, container, collId, docsPath;

const NAMES = ["alice", "Bob", "carol", "Dave", "eve"];
const MIX = [1, "1", true, null, false, "a", 2.5]; // documents 0..6; 7.. have no "mix"
const N = 30;

function makeDoc(i) {
  const d = {
    id: `d${String(i).padStart(2, "0")}`,
    pk: `p${i % 6}`,
    n: i,
    name: `${NAMES[i % 5]}${i}`,
    tags: i % 3 === 0 ? ["x", "y"] : ["y"],
    nested: { v: i % 4, w: { deep: i } },
    flag: i % 2 === 0,
    price: i * 1.5,
  };
  if (i % 7 === 0) d.opt = null;
  else if (i % 7 !== 1) d.opt = i % 7; // i % 7 == 1: no "opt" at all
  if (i < MIX.length) d.mix = MIX[i];
  return d;
}
const DOCS = Array.from({ length: N }, (_, i) => makeDoc(i));
const byId = new Map(DOCS.map((d) => [d.id, d]));

useContainer(
  async (e) => {
    ({ srv, client, database, container, collId, docsPath } = e);
    for (const d of DOCS) await container.items.create(d);
  },
  { partitions: PARTITIONS },
);

/** Runs a query through the SDK (fetchAll) and returns the rows. */
async function q(query, parameters, opts) {
  const spec = parameters ? { query, parameters } : query;
  const { resources } = await container.items.query(spec, opts).fetchAll();
  return resources;
}
const sortedIds = (rows) => rows.map((r) => r.id).sort();
const idsWhere = (pred) => DOCS.filter(pred).map((d) => d.id).sort();
const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

function rawQuery(body, headers = {}) {
  return rawRequest(srv, {
    method: "POST",
    path: docsPath,
    headers: { "content-type": "application/query+json", "x-ms-documentdb-isquery": "True", ...headers },
    body,
  });
}

test(`the data is spread over several of the ${PARTITIONS} ranges (so queries really are cross-partition)`, async () => {
  const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();
  assert.equal(ranges.length, PARTITIONS);
  const used = new Set();
  for (const d of DOCS) {
    const epk = await sdkEpk(d.pk);
    used.add(ranges.find((r) => epk >= r.minInclusive && (epk < r.maxExclusive || r.maxExclusive === "FF")).id);
  }
  assert.ok(used.size >= 2, `the 6 partition keys land in ${used.size} range(s)`);
});

test("SELECT * returns whole documents with their system properties", async () => {
  const rows = await q("SELECT * FROM c WHERE c.id = 'd03'");
  assert.equal(rows.length, 1);
  assert.deepEqual(userFields(rows[0]), byId.get("d03"));
  for (const p of ["_rid", "_self", "_etag", "_ts"]) assert.ok(rows[0][p] !== undefined, `SELECT * keeps ${p}`);
  const all = await q("SELECT * FROM c");
  assert.deepEqual(sortedIds(all), DOCS.map((d) => d.id).sort(), "every document exactly once across the ranges");
});

test("WHERE: comparisons, AND/OR/NOT, IN, BETWEEN, arithmetic, dotted and bracketed paths, aliases", async () => {
  const cases = [
    ["c.n = 5", (d) => d.n === 5],
    ["c.n != 5", (d) => d.n !== 5],
    ["c.n <> 5", (d) => d.n !== 5],
    ["c.n < 3", (d) => d.n < 3],
    ["c.n <= 3", (d) => d.n <= 3],
    ["c.n > 26", (d) => d.n > 26],
    ["c.n >= 26", (d) => d.n >= 26],
    ["c.n > 5 AND c.flag = true", (d) => d.n > 5 && d.flag],
    ["c.n < 2 OR c.n > 27", (d) => d.n < 2 || d.n > 27],
    ["NOT (c.n > 2)", (d) => !(d.n > 2)],
    ["c.flag", (d) => d.flag === true],
    ["c.flag = false AND NOT c.n IN (1, 3, 5)", (d) => !d.flag && ![1, 3, 5].includes(d.n)],
    ["c.pk IN ('p1', 'p2')", (d) => ["p1", "p2"].includes(d.pk)],
    ["c.n BETWEEN 10 AND 12", (d) => d.n >= 10 && d.n <= 12],
    ["c.n * 2 + 1 = 11", (d) => d.n === 5],
    ["(c.n + 1) * 2 = 12", (d) => d.n === 5],
    ["c.n % 7 = 0", (d) => d.n % 7 === 0],
    ["c.n - 1 = 0", (d) => d.n === 1],
    ["c.n / 2 = 3.5", (d) => d.n === 7],
    ["-c.n = -4", (d) => d.n === 4],
    ["c.price > 40", (d) => d.price > 40],
    ["c.nested.v = 2", (d) => d.nested.v === 2],
    ['c["nested"]["v"] = 2', (d) => d.nested.v === 2],
    ["c.nested['w'].deep >= 28", (d) => d.nested.w.deep >= 28],
    ["c.tags[0] = 'x'", (d) => d.tags[0] === "x"],
    ["c.tags[1] = 'y'", (d) => d.tags[1] === "y"],
    ["c.name > 'd'", (d) => d.name > "d"],
    ["c.name >= 'Bob' AND c.name < 'C'", (d) => d.name >= "Bob" && d.name < "C"],
    ["c.id = 'd05'", (d) => d.id === "d05"],
    ["c.pk = 'p1' AND (c.n < 10 OR c.n > 20)", (d) => d.pk === "p1" && (d.n < 10 || d.n > 20)],
    ["true", () => true],
    ["false", () => false],
  ];
  for (const [where, pred] of cases) {
    const rows = await q(`SELECT * FROM c WHERE ${where}`);
    assert.deepEqual(sortedIds(rows), idsWhere(pred), `WHERE ${where}`);
  }
  // FROM with other aliases.
  assert.deepEqual(sortedIds(await q("SELECT * FROM docs d WHERE d.n = 1")), ["d01"]);
  assert.deepEqual(sortedIds(await q("SELECT * FROM c AS x WHERE x.n = 2")), ["d02"]);
  assert.deepEqual(sortedIds(await q("SELECT * FROM root r WHERE r['n'] = 3")), ["d03"]);
  assert.deepEqual(sortedIds(await q("select * from c where c.n = 4")), ["d04"], "keywords in lower case");
});

test("undefined versus null, and mixed types: only exactly-true conditions match", async () => {
  const cases = [
    ["c.opt = null", (d) => d.opt === null],
    ["c.opt != null", () => false], // a number compared with null is undefined, null != null is false
    ["IS_DEFINED(c.opt) AND NOT IS_NULL(c.opt)", (d) => typeof d.opt === "number"],
    ["IS_DEFINED(c.opt) = false", (d) => d.opt === undefined],
    ["NOT IS_DEFINED(c.opt)", (d) => d.opt === undefined],
    ["c.opt > 3", (d) => typeof d.opt === "number" && d.opt > 3],
    ["NOT (c.opt > 3)", (d) => typeof d.opt === "number" && !(d.opt > 3)], // NOT undefined is undefined
    ["c.nope = 1", () => false],
    ["c.nope = c.nope2", () => false], // undefined = undefined is undefined
    ["c.nope != 1", () => false],
    ["c.mix = 1", (d) => d.mix === 1],
    ["c.mix > 1", (d) => typeof d.mix === "number" && d.mix > 1],
    ["c.mix = '1'", (d) => d.mix === "1"],
    ["c.mix = true", (d) => d.mix === true],
    ["c.mix >= 'a'", (d) => typeof d.mix === "string" && d.mix >= "a"],
    ["c.n = '5'", () => false],
    ["c.flag = 1", () => false],
    ["c.flag OR c.nope", (d) => d.flag === true],
    ["c.nope OR c.flag", (d) => d.flag === true],
    ["c.nope AND false", () => false],
    ["c.n + 'x' = 'x'", () => false], // arithmetic on a string is undefined
  ];
  for (const [where, pred] of cases) {
    const rows = await q(`SELECT * FROM c WHERE ${where}`);
    assert.deepEqual(sortedIds(rows), idsWhere(pred), `WHERE ${where}`);
  }
});

test("functions: type checks, strings, arrays and math (SELECT VALUE fn(...) on one document)", async () => {
  const d = byId.get("d07"); // name carol7, pk p1, tags ["y"], opt null, no mix, price 10.5
  assert.equal(d.name, "carol7");
  const cases = [
    ["IS_DEFINED(c.n)", true],
    ["IS_DEFINED(c.zzz)", false],
    ["IS_DEFINED(c.opt)", true],
    ["IS_NULL(c.opt)", true],
    ["IS_NULL(c.n)", false],
    ["IS_NULL(c.zzz)", false],
    ["IS_NUMBER(c.n)", true],
    ["IS_NUMBER(c.name)", false],
    ["IS_STRING(c.name)", true],
    ["IS_STRING(c.zzz)", false],
    ["IS_BOOL(c.flag)", true],
    ["IS_BOOL(0)", false],
    ["IS_ARRAY(c.tags)", true],
    ["IS_ARRAY(c.nested)", false],
    ["IS_OBJECT(c.nested)", true],
    ["IS_OBJECT(c.tags)", false],
    ["IS_OBJECT(null)", false],
    ["STARTSWITH(c.name, 'car')", true],
    ["STARTSWITH(c.name, 'Car')", false],
    ["ENDSWITH(c.name, 'l7')", true],
    ["ENDSWITH(c.name, 'car')", false],
    ["CONTAINS(c.name, 'rol')", true],
    ["CONTAINS(c.name, 'zz')", false],
    ["LOWER('AbC')", "abc"],
    ["UPPER(c.name)", "CAROL7"],
    ["LENGTH(c.name)", 6],
    ["LENGTH('')", 0],
    ["CONCAT(c.name, '-', c.pk)", "carol7-p1"],
    ["SUBSTRING(c.name, 1, 3)", "aro"],
    ["SUBSTRING('abc', 1, 100)", "bc"],
    ["ARRAY_CONTAINS(c.tags, 'y')", true],
    ["ARRAY_CONTAINS(c.tags, 'x')", false],
    ["ARRAY_CONTAINS([1, 2, 3], 2)", true],
    ["ARRAY_LENGTH(c.tags)", 1],
    ["ARRAY_LENGTH([])", 0],
    ["ABS(-3)", 3],
    ["ABS(c.n - 10)", 3],
    ["ABS(2.5)", 2.5],
    ["FLOOR(2.7)", 2],
    ["FLOOR(-2.5)", -3],
    ["ROUND(2.5)", 3],
    ["ROUND(-2.5)", -3],
    ["ROUND(2.4)", 2],
    ["ROUND(c.price)", 11],
    ["lower(c.name)", "carol7"],
    ['"double-quoted"', "double-quoted"],
    ["'it\\'s'", "it's"],
    ["'tab\\there'", "tab\there"],
    ["LENGTH('héllo')", 5],
    ["UPPER('é')", "É"],
  ];
  for (const [expr, want] of cases) {
    const rows = await q(`SELECT VALUE ${expr} FROM c WHERE c.id = 'd07'`);
    assert.deepEqual(rows, [want], `SELECT VALUE ${expr}`);
  }
  // Functions on the wrong types give undefined, and SELECT VALUE drops undefined rows.
  for (const expr of ["LOWER(c.n)", "UPPER(c.zzz)", "LENGTH(c.n)", "ABS('x')", "FLOOR(c.name)", "ARRAY_LENGTH(c.name)", "STARTSWITH(c.n, 'a')", "CONTAINS(c.zzz, 'a')"]) {
    const rows = await q(`SELECT VALUE ${expr} FROM c WHERE c.id = 'd07'`);
    assert.deepEqual(rows, [], `SELECT VALUE ${expr} is undefined`);
  }
  // ARRAY_CONTAINS with partial object matching.
  assert.deepEqual(await q(`SELECT VALUE ARRAY_CONTAINS([{"a": 1, "b": 2}], {"a": 1}, true) FROM c WHERE c.id = 'd07'`), [true]);
  assert.deepEqual(await q(`SELECT VALUE ARRAY_CONTAINS([{"a": 1, "b": 2}], {"a": 1}) FROM c WHERE c.id = 'd07'`), [false]);
  // Functions in WHERE.
  const where = [
    ["STARTSWITH(c.name, 'al')", (x) => x.name.startsWith("al")],
    ["ENDSWITH(c.name, '9')", (x) => x.name.endsWith("9")],
    ["CONTAINS(c.name, 'o')", (x) => x.name.includes("o")],
    ["ARRAY_CONTAINS(c.tags, 'x')", (x) => x.tags.includes("x")],
    ["LOWER(c.name) = 'bob1'", (x) => x.name.toLowerCase() === "bob1"],
    ["UPPER(c.name) = 'DAVE3'", (x) => x.name.toUpperCase() === "DAVE3"],
    ["LENGTH(c.name) = 4", (x) => x.name.length === 4],
    ["ARRAY_LENGTH(c.tags) = 2", (x) => x.tags.length === 2],
    ["ABS(c.n - 15) <= 1", (x) => Math.abs(x.n - 15) <= 1],
    ["FLOOR(c.price) = 7", (x) => Math.floor(x.price) === 7],
    ["IS_NUMBER(c.mix)", (x) => typeof x.mix === "number"],
    ["IS_STRING(c.mix)", (x) => typeof x.mix === "string"],
    ["IS_BOOL(c.mix)", (x) => typeof x.mix === "boolean"],
    ["IS_NULL(c.mix)", (x) => x.mix === null],
    ["CONCAT(c.pk, '-', c.id) = 'p2-d08'", (x) => x.id === "d08"],
    ["SUBSTRING(c.name, 0, 1) = 'e'", (x) => x.name[0] === "e"],
  ];
  for (const [w, pred] of where) {
    assert.deepEqual(sortedIds(await q(`SELECT * FROM c WHERE ${w}`)), idsWhere(pred), `WHERE ${w}`);
  }
});

test("parameters: scalars, arrays, null, objects as values; an unbound parameter is 400", async () => {
  let rows = await q("SELECT * FROM c WHERE c.pk = @pk AND c.n >= @min", [
    { name: "@pk", value: "p1" },
    { name: "@min", value: 10 },
  ]);
  assert.deepEqual(sortedIds(rows), idsWhere((d) => d.pk === "p1" && d.n >= 10));
  rows = await q("SELECT * FROM c WHERE ARRAY_CONTAINS(@pks, c.pk)", [{ name: "@pks", value: ["p0", "p5"] }]);
  assert.deepEqual(sortedIds(rows), idsWhere((d) => ["p0", "p5"].includes(d.pk)));
  rows = await q("SELECT * FROM c WHERE c.opt = @v", [{ name: "@v", value: null }]);
  assert.deepEqual(sortedIds(rows), idsWhere((d) => d.opt === null));
  rows = await q("SELECT VALUE @obj FROM c WHERE c.id = 'd01'", [{ name: "@obj", value: { a: [1, "two", null] } }]);
  assert.deepEqual(rows, [{ a: [1, "two", null] }]);
  rows = await q("SELECT * FROM c WHERE c.name = @name", [{ name: "@name", value: "it's \"quoted\"" }]);
  assert.deepEqual(rows, [], "a parameter is a value, never query text");
  await assert.rejects(q("SELECT * FROM c WHERE c.n = @nope"), code(400), "unbound parameter");
  await assert.rejects(q("SELECT * FROM c WHERE c.n = @nope", [{ name: "@other", value: 1 }]), code(400), "unbound parameter next to a bound one");
});

test("aggregates: COUNT, SUM, MIN, MAX, AVG, globally correct across ranges, and over empty sets", async () => {
  const ns = DOCS.map((d) => d.n);
  const sum = ns.reduce((a, b) => a + b, 0);
  const names = DOCS.map((d) => d.name).sort(cmp);
  const cases = [
    ["SELECT VALUE COUNT(1) FROM c", [N]],
    ["SELECT VALUE COUNT(c.id) FROM c", [N]],
    ["SELECT VALUE SUM(c.n) FROM c", [sum]],
    ["SELECT VALUE MIN(c.n) FROM c", [0]],
    ["SELECT VALUE MAX(c.n) FROM c", [N - 1]],
    ["SELECT VALUE AVG(c.n) FROM c", [sum / N]],
    ["SELECT VALUE SUM(c.price) FROM c", [sum * 1.5]],
    ["SELECT VALUE MIN(c.name) FROM c", [names[0]]],
    ["SELECT VALUE MAX(c.name) FROM c", [names[names.length - 1]]],
    ["SELECT VALUE COUNT(1) FROM c WHERE c.pk = 'p1'", [DOCS.filter((d) => d.pk === "p1").length]],
    ["SELECT VALUE SUM(c.n) FROM c WHERE c.flag", [DOCS.filter((d) => d.flag).reduce((a, d) => a + d.n, 0)]],
    ["SELECT VALUE MAX(c.nested.w.deep) FROM c WHERE c.n < 10", [9]],
    ["SELECT VALUE SUM(c.opt) FROM c", []], // some opt are null: the sum is undefined
    ["SELECT VALUE SUM(c.opt) FROM c WHERE IS_NUMBER(c.opt)", [DOCS.reduce((a, d) => a + (typeof d.opt === "number" ? d.opt : 0), 0)]],
    ["SELECT VALUE COUNT(1) FROM c WHERE c.n > 1000", [0]],
    ["SELECT VALUE SUM(c.n) FROM c WHERE c.n > 1000", [0]],
    ["SELECT VALUE AVG(c.n) FROM c WHERE c.n > 1000", []],
    ["SELECT VALUE MIN(c.n) FROM c WHERE c.n > 1000", []],
    ["SELECT VALUE MAX(c.n) FROM c WHERE c.n > 1000", []],
    ["SELECT VALUE SUM(c.mix) FROM c", []], // a string, boolean or null among the values: undefined
    ["SELECT VALUE AVG(c.nope) FROM c", []],
    ["SELECT VALUE COUNT(1) FROM c WHERE c.nope = 1", [0]],
  ];
  for (const [sql, want] of cases) assert.deepEqual(await q(sql), want, sql);
  // Non-VALUE forms: one row with every aggregate; "$1" for an unnamed one.
  assert.deepEqual(await q("SELECT COUNT(1) AS cnt, SUM(c.n) AS s, MIN(c.n) AS lo, MAX(c.n) AS hi, AVG(c.n) AS a FROM c"), [
    { cnt: N, s: sum, lo: 0, hi: N - 1, a: sum / N },
  ]);
  assert.deepEqual(await q("SELECT COUNT(1) FROM c"), [{ $1: N }]);
  assert.deepEqual(await q("SELECT COUNT(1) AS cnt, AVG(c.n) AS a FROM c WHERE c.n > 1000"), [{ cnt: 0 }], "undefined aggregates are left out of the row");
  // Single-partition aggregates.
  assert.deepEqual(await q("SELECT VALUE COUNT(1) FROM c", undefined, { partitionKey: "p2" }), [DOCS.filter((d) => d.pk === "p2").length]);
  assert.deepEqual(await q("SELECT VALUE SUM(c.n) FROM c", undefined, { partitionKey: "p2" }), [DOCS.filter((d) => d.pk === "p2").reduce((a, d) => a + d.n, 0)]);
});

test("ORDER BY one or more fields, ascending and descending, globally across ranges", async () => {
  const order = (sorter) => [...DOCS].sort(sorter).map((d) => d.id);
  const cases = [
    ["ORDER BY c.n", (a, b) => a.n - b.n],
    ["ORDER BY c.n ASC", (a, b) => a.n - b.n],
    ["ORDER BY c.n DESC", (a, b) => b.n - a.n],
    ["ORDER BY c.name", (a, b) => cmp(a.name, b.name)],
    ["ORDER BY c.name DESC", (a, b) => cmp(b.name, a.name)],
    ["ORDER BY c.price DESC", (a, b) => b.price - a.price],
    ["ORDER BY c.nested.w.deep", (a, b) => a.n - b.n],
    ["ORDER BY c.pk ASC, c.n DESC", (a, b) => cmp(a.pk, b.pk) || b.n - a.n],
    ["ORDER BY c.flag DESC, c.price ASC", (a, b) => Number(b.flag) - Number(a.flag) || a.price - b.price],
    ["ORDER BY c.nested.v, c.name DESC", (a, b) => a.nested.v - b.nested.v || cmp(b.name, a.name)],
  ];
  for (const [clause, sorter] of cases) {
    const rows = await q(`SELECT c.id FROM c ${clause}`);
    assert.deepEqual(rows.map((r) => r.id), order(sorter), clause);
  }
  assert.deepEqual(
    await q("SELECT VALUE c.n FROM c WHERE c.pk = 'p1' ORDER BY c.n DESC"),
    DOCS.filter((d) => d.pk === "p1").map((d) => d.n).sort((a, b) => b - a),
  );
  // Mixed types sort undefined < null < false < true < numbers < strings; undefined keys are kept.
  const mixed = await q("SELECT VALUE c.id FROM c WHERE c.n < 8 ORDER BY c.mix");
  assert.deepEqual(mixed, ["d07", "d03", "d04", "d02", "d00", "d06", "d01", "d05"], "ORDER BY over mixed types");
  const mixedDesc = await q("SELECT VALUE c.id FROM c WHERE c.n < 8 ORDER BY c.mix DESC");
  assert.deepEqual(mixedDesc, ["d05", "d01", "d06", "d00", "d02", "d04", "d03", "d07"], "ORDER BY DESC over mixed types");
});

test("DISTINCT, TOP, OFFSET LIMIT", async () => {
  const pks = [...new Set(DOCS.map((d) => d.pk))].sort();
  assert.deepEqual((await q("SELECT DISTINCT VALUE c.pk FROM c")).sort(), pks, "DISTINCT VALUE over ranges: each value once");
  const flags = await q("SELECT DISTINCT c.flag FROM c");
  assert.deepEqual(flags.map((r) => r.flag).sort(), [false, true]);
  const tags = await q("SELECT DISTINCT c.tags FROM c");
  assert.deepEqual(tags.map((r) => JSON.stringify(r.tags)).sort(), ['["x","y"]', '["y"]'], "DISTINCT on arrays");
  assert.deepEqual(await q("SELECT DISTINCT VALUE c.nested.v FROM c ORDER BY c.nested.v DESC"), [3, 2, 1, 0]);

  assert.deepEqual((await q("SELECT TOP 3 c.id FROM c ORDER BY c.n")).map((r) => r.id), ["d00", "d01", "d02"]);
  assert.deepEqual(await q("SELECT TOP 2 VALUE c.n FROM c ORDER BY c.n DESC"), [29, 28]);
  const top5 = await q("SELECT TOP 5 * FROM c");
  assert.equal(top5.length, 5, "TOP without ORDER BY is global: 5 rows, not 5 per range");
  assert.equal(new Set(top5.map((r) => r.id)).size, 5);
  assert.deepEqual(await q("SELECT TOP 0 * FROM c"), []);

  assert.deepEqual(await q("SELECT VALUE c.n FROM c ORDER BY c.n OFFSET 5 LIMIT 4"), [5, 6, 7, 8]);
  assert.deepEqual(await q("SELECT VALUE c.n FROM c ORDER BY c.n DESC OFFSET 1 LIMIT 2"), [28, 27]);
  assert.deepEqual(await q("SELECT VALUE c.n FROM c ORDER BY c.n OFFSET 28 LIMIT 10"), [28, 29]);
  assert.deepEqual(await q("SELECT VALUE c.n FROM c ORDER BY c.n OFFSET 40 LIMIT 5"), []);
  assert.equal((await q("SELECT * FROM c OFFSET 0 LIMIT 3")).length, 3, "OFFSET LIMIT without ORDER BY is global");
  assert.equal((await q("SELECT * FROM c OFFSET 27 LIMIT 100")).length, N - 27);
  assert.deepEqual(await q("SELECT VALUE c.n FROM c WHERE c.pk = 'p0' ORDER BY c.n OFFSET 1 LIMIT 2"), [6, 12]);
});

test("SELECT VALUE and projections with aliases; undefined fields are dropped", async () => {
  assert.deepEqual(await q("SELECT c.id, c.nested.v AS v, c.name AS nm FROM c WHERE c.id = 'd03'"), [{ id: "d03", v: 3, nm: "Dave3" }]);
  assert.deepEqual(await q("SELECT c.id, c.zzz FROM c WHERE c.id = 'd03'"), [{ id: "d03" }], "an undefined projection is left out");
  assert.deepEqual(await q("SELECT c.zzz FROM c WHERE c.id = 'd03'"), [{}], "a row of only undefined fields is {}");
  assert.deepEqual(await q("SELECT c.nested.w FROM c WHERE c.id = 'd03'"), [{ w: { deep: 3 } }], "the implicit name is the last path segment");
  assert.deepEqual(await q("SELECT c.tags[0] AS t FROM c WHERE c.id = 'd03'"), [{ t: "x" }]);
  assert.deepEqual(await q("SELECT c.n + 1 AS n1, c.n * c.n AS sq FROM c WHERE c.id = 'd04'"), [{ n1: 5, sq: 16 }]);
  assert.deepEqual(await q("SELECT c.n + 1 FROM c WHERE c.id = 'd04'"), [{ $1: 5 }], "an unnamed expression is $1");
  assert.deepEqual(await q("SELECT VALUE c.name FROM c WHERE c.n < 3 ORDER BY c.n"), ["alice0", "Bob1", "carol2"]);
  assert.deepEqual(await q("SELECT VALUE c.opt FROM c WHERE c.n < 3 ORDER BY c.n"), [null, 2], "SELECT VALUE drops undefined rows, keeps null");
  assert.deepEqual(await q("SELECT VALUE c.nested FROM c WHERE c.id = 'd05'"), [{ v: 1, w: { deep: 5 } }]);
  assert.deepEqual(await q("SELECT VALUE [c.n, c.pk] FROM c WHERE c.id = 'd05'"), [[5, "p5"]]);
  assert.deepEqual(await q("SELECT VALUE {\"k\": c.n, \"name\": c.name} FROM c WHERE c.id = 'd05'"), [{ k: 5, name: "alice5" }]);
  assert.deepEqual(await q("SELECT VALUE 'const' FROM c WHERE c.n < 2"), ["const", "const"]);
  assert.deepEqual(await q("SELECT d.id AS theId FROM docs d WHERE d.n = 9"), [{ theId: "d09" }]);
});

test("paging with a small maxItemCount: fetchNext and fetchAll give every row exactly once, in order", async () => {
  const all = DOCS.map((d) => d.id).sort();
  const it = container.items.query("SELECT * FROM c", { maxItemCount: 4 });
  const { items, pages } = await drainQuery(it);
  assert.deepEqual(sortedIds(items), all, "SELECT * paged by 4: each document once");
  assert.ok(pages.length >= Math.ceil(N / 4), `${pages.length} pages for ${N} rows of at most 4`);
  for (const p of pages) assert.ok(p.length <= 4, `a page holds ${p.length} > 4 rows`);

  const ordered = await drainQuery(container.items.query("SELECT c.id, c.n FROM c ORDER BY c.n DESC", { maxItemCount: 4 }));
  assert.deepEqual(ordered.items.map((r) => r.n), DOCS.map((d) => d.n).sort((a, b) => b - a), "ORDER BY paged: complete and in order");
  assert.ok(ordered.pages.length >= Math.ceil(N / 4));
  for (const p of ordered.pages) assert.ok(p.length <= 4, `an ORDER BY page holds ${p.length} > 4 rows`);

  const filtered = await drainQuery(container.items.query("SELECT VALUE c.id FROM c WHERE c.flag", { maxItemCount: 3 }));
  assert.deepEqual(filtered.items.sort(), idsWhere((d) => d.flag));

  const { resources } = await container.items.query("SELECT VALUE c.n FROM c ORDER BY c.n", { maxItemCount: 3 }).fetchAll();
  assert.deepEqual(resources, DOCS.map((d) => d.n), "fetchAll with maxItemCount 3");

  const offset = await drainQuery(container.items.query("SELECT VALUE c.n FROM c ORDER BY c.n OFFSET 3 LIMIT 10", { maxItemCount: 4 }));
  assert.deepEqual(offset.items, [3, 4, 5, 6, 7, 8, 9, 10, 11, 12], "OFFSET LIMIT paged");
});

test("single-partition paging resumes from a continuation token in a new iterator", async () => {
  const want = idsWhere((d) => d.pk === "p0");
  const sql = "SELECT * FROM c WHERE c.n >= 0";
  const first = container.items.query(sql, { partitionKey: "p0", maxItemCount: 2 });
  const page1 = await first.fetchNext();
  assert.equal(page1.resources.length, 2);
  assert.equal(typeof page1.continuationToken, "string", "a page with more to come has a continuation token");
  const rest = await drainQuery(container.items.query(sql, { partitionKey: "p0", maxItemCount: 2, continuationToken: page1.continuationToken }));
  assert.deepEqual(sortedIds([...page1.resources, ...rest.items]), want, "page 1 + resumed = every row once");
});

test("cross-partition paging resumes from a continuation token in a new iterator", async () => {
  for (const sql of ["SELECT * FROM c WHERE c.n >= 0", "SELECT * FROM c ORDER BY c.n"]) {
    const first = container.items.query(sql, { maxItemCount: 5 });
    const head = [];
    let token;
    for (let i = 0; i < 2; i++) {
      const page = await first.fetchNext();
      head.push(...page.resources);
      token = page.continuationToken;
    }
    assert.equal(typeof token, "string", `${sql}: a continuation after two pages of 5`);
    const rest = await drainQuery(container.items.query(sql, { maxItemCount: 5, continuationToken: token }));
    const all = [...head, ...rest.items];
    assert.deepEqual(sortedIds(all), DOCS.map((d) => d.id).sort(), `${sql}: head + resumed = every row once`);
    if (sql.includes("ORDER BY")) assert.deepEqual(all.map((r) => r.n), DOCS.map((d) => d.n), `${sql}: still in order`);
  }
});

test("raw HTTP paging: x-ms-continuation round-trips until it is absent; a bad one is 400", async () => {
  const seen = [];
  let cont;
  for (let pages = 0; ; pages++) {
    if (pages > 20) assert.fail("x-ms-continuation never went away");
    const r = await rawQuery({ query: "SELECT * FROM c" }, { ...pkHeaders("p1"), "x-ms-max-item-count": "2", ...(cont ? { "x-ms-continuation": cont } : {}) });
    assert.equal(r.status, 200, show(r));
    assert.ok(r.json.Documents.length <= 2);
    assert.equal(r.headers["x-ms-item-count"], String(r.json.Documents.length));
    assert.equal(r.json._count, r.json.Documents.length);
    seen.push(...r.json.Documents.map((x) => x.id));
    cont = r.headers["x-ms-continuation"];
    if (!cont) break;
  }
  assert.deepEqual(seen.sort(), idsWhere((d) => d.pk === "p1"));
  const bad = await rawQuery({ query: "SELECT * FROM c" }, { ...pkHeaders("p1"), "x-ms-continuation": "garbage" });
  assert.equal(bad.status, 400, show(bad));
});

test("raw HTTP: per-range queries partition the container; the query plan answers 200", async () => {
  const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();
  const got = [];
  for (const r of ranges) {
    const res = await rawQuery(
      { query: "SELECT * FROM c WHERE c.n >= 0" },
      { "x-ms-documentdb-query-enablecrosspartition": "True", "x-ms-documentdb-partitionkeyrangeid": r.id, "x-ms-max-item-count": "1000" },
    );
    assert.equal(res.status, 200, show(res));
    for (const d of res.json.Documents) {
      const epk = await sdkEpk(d.pk);
      assert.ok(epk >= r.minInclusive && (epk < r.maxExclusive || r.maxExclusive === "FF"), `${d.id} (EPK ${epk}) returned for range ${r.id}`);
    }
    got.push(...res.json.Documents.map((d) => d.id));
  }
  assert.deepEqual(got.sort(), DOCS.map((d) => d.id).sort(), "the ranges together hold every document once");

  const plan = await rawQuery(
    { query: "SELECT * FROM c ORDER BY c.n" },
    {
      "x-ms-cosmos-is-query-plan-request": "True",
      "x-ms-cosmos-query-version": "1.4",
      "x-ms-cosmos-supported-query-features": "NonValueAggregate, Aggregate, Distinct, MultipleOrderBy, OffsetAndLimit, OrderBy, Top, CompositeAggregate, GroupBy, MultipleAggregates",
      "x-ms-documentdb-query-enablecrosspartition": "True",
    },
  );
  assert.equal(plan.status, 200, show(plan));
  assert.equal(typeof plan.json.queryInfo, "object", plan.text);
  assert.ok(Array.isArray(plan.json.queryRanges) && plan.json.queryRanges.length >= 1, plan.text);
});

test("invalid and unsupported syntax is 400 naming the position", async () => {
  const bad = [
    ["SELECT * FRM c", 10],
    ["SELECT * FROM c WHERE c.n = ", 29],
    ["SELECT * FROM c WHERE (c.n = 1", 31],
    ["SELECT c.id,, c.n FROM c", 13],
  ];
  for (const [sql, pos] of bad) {
    const r = await rawQuery({ query: sql }, pkHeaders("p1"));
    assert.equal(r.status, 400, `${sql}: ${show(r)}`);
    assert.equal(r.json?.code, "BadRequest");
    const m = /position\s*:?\s*(\d+)/i.exec(r.json?.message ?? "");
    assert.ok(m, `${sql}: the message names a position: ${r.json?.message}`);
    assert.ok(Math.abs(Number(m[1]) - pos) <= 1, `${sql}: position ${m[1]}, expected ${pos} (1-based) or ${pos - 1} (0-based): ${r.json.message}`);
  }
  for (const sql of [
    "SELECT * FROM c JOIN t IN c.tags",
    "SELECT VALUE NOPE(c.n) FROM c",
    "SELECT * FROM c WHERE",
    "DELETE FROM c",
    "",
    "SELECT * FROM c ORDER BY",
    "SELECT * FROM c OFFSET 1",
    "SELECT TOP -1 * FROM c",
    "SELECT * FROM c WHERE c.name = 'unterminated",
  ]) {
    const r = await rawQuery({ query: sql }, pkHeaders("p1"));
    assert.equal(r.status, 400, `${JSON.stringify(sql)}: ${show(r)}`);
    assert.ok(r.json?.message, `${JSON.stringify(sql)}: error message`);
  }
  for (const body of [{}, { query: 5 }, { query: "SELECT * FROM c", parameters: "x" }]) {
    const r = await rawQuery(body, pkHeaders("p1"));
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${show(r)}`);
  }
  // Through the SDK (the query plan request fails first).
  await assert.rejects(q("SELECT * FRM c"), code(400));
  await assert.rejects(q("SELECT * FRM c", undefined, { partitionKey: "p1" }), code(400));
});

test("queries over databases and containers", async () => {
  const { resources: dbs } = await client.databases.query({ query: "SELECT * FROM root r WHERE r.id = @id", parameters: [{ name: "@id", value: database.id }] }).fetchAll();
  assert.deepEqual(dbs.map((d) => d.id), [database.id]);
  const { resources: colls } = await database.containers.query("SELECT VALUE r.id FROM r").fetchAll();
  assert.deepEqual(colls, [collId]);
});
