// The gateway's query behaviour (issue 15, behaviour 6, cosmolite --gateway-query-plans):
// the query plan names the client-side work (orderBy, aggregates, top, offset, limit,
// distinctType, GROUP BY) and a rewritten per-range query; every range request runs over
// its own range only; a bare cross-partition query that needs a plan gets 400/1004 with
// the plan in additionalErrorInfo. The SDK's pipeline must still produce the global
// answer, which this file computes in JavaScript from the documents it wrote.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { rawRequest, show, startCosmolite, uid } from "./harness.mjs";

const PARTITIONS = 4;
const TEAMS = ["red", "green", "blue"];
let srv;
let container;
let docsPath;
const docs = [];

before(async () => {
  srv = await startCosmolite(null, { partitions: PARTITIONS, args: ["--gateway-query-plans"] });
  const client = srv.client();
  const { database } = await client.databases.create({ id: uid("db") });
  ({ container } = await database.containers.create({ id: uid("coll"), partitionKey: "/pk" }));
  docsPath = `/dbs/${database.id}/colls/${container.id}/docs`;
  for (let i = 0; i < 48; i++) {
    // n is unique (a permutation), so every ORDER BY c.n has one right answer.
    const d = { id: `d${i}`, pk: `p${i % 13}`, n: (i * 29) % 48, team: TEAMS[i % 3], s: `s${(i * 7) % 11}` };
    if (i % 5 === 0) delete d.s; // some documents lack s: aggregates skip undefined
    await container.items.create(d);
    docs.push(d);
  }
});
after(async () => {
  await srv?.stop();
});

async function all(query) {
  const { resources } = await container.items.query(query, { maxItemCount: 5 }).fetchAll();
  return resources;
}

const byN = (a, b) => a.n - b.n;
const ids = (rows) => rows.map((r) => r.id);

function planRequest(query, headers = {}) {
  return rawRequest(srv, {
    method: "POST",
    path: docsPath,
    headers: {
      "content-type": "application/query+json",
      "x-ms-documentdb-isquery": "True",
      "x-ms-cosmos-is-query-plan-request": "True",
      "x-ms-cosmos-supported-query-features": "Aggregate, CompositeAggregate, Distinct, GroupBy, MultipleOrderBy, OffsetAndLimit, OrderBy, Top",
      ...headers,
    },
    body: { query },
  });
}

function rangeQuery(query, range) {
  return rawRequest(srv, {
    method: "POST",
    path: docsPath,
    headers: {
      "content-type": "application/query+json",
      "x-ms-documentdb-isquery": "True",
      "x-ms-documentdb-query-enablecrosspartition": "True",
      "x-ms-max-item-count": "1000",
      ...(range === undefined ? {} : { "x-ms-documentdb-partitionkeyrangeid": range }),
    },
    body: { query },
  });
}

test("the query plan describes ORDER BY and rewrites the query to order-by items", async () => {
  const r = await planRequest("SELECT c.id FROM c WHERE c.n > 3 ORDER BY c.team ASC, c.n DESC");
  assert.equal(r.status, 200, show(r));
  const info = r.json.queryInfo;
  assert.deepEqual(info.orderBy, ["Ascending", "Descending"]);
  assert.deepEqual(info.orderByExpressions, ["c.team", "c.n"]);
  assert.match(info.rewrittenQuery, /AS orderByItems/);
  assert.match(info.rewrittenQuery, /AS payload/);
  assert.match(info.rewrittenQuery, /\{documentdb-formattableorderbyquery-filter\}/);
  assert.deepEqual(r.json.queryRanges, [{ min: "", max: "FF", isMinInclusive: true, isMaxInclusive: false }]);
});

test("the query plan describes TOP, OFFSET LIMIT, DISTINCT, aggregates and GROUP BY", async () => {
  const top = (await planRequest("SELECT TOP 3 * FROM c")).json.queryInfo;
  assert.equal(top.top, 3);
  const off = (await planRequest("SELECT * FROM c OFFSET 2 LIMIT 5")).json.queryInfo;
  assert.deepEqual([off.offset, off.limit], [2, 5]);
  assert.match(off.rewrittenQuery, /OFFSET 0 LIMIT 7/);
  assert.equal((await planRequest("SELECT DISTINCT VALUE c.team FROM c")).json.queryInfo.distinctType, "Unordered");
  const agg = (await planRequest("SELECT VALUE AVG(c.n) FROM c")).json.queryInfo;
  assert.deepEqual(agg.aggregates, ["Average"]);
  assert.equal(agg.hasSelectValue, true);
  assert.match(agg.rewrittenQuery, /"sum"/);
  const g = (await planRequest("SELECT c.team, COUNT(1) AS cnt FROM c GROUP BY c.team")).json.queryInfo;
  assert.deepEqual(g.groupByExpressions, ["c.team"]);
  assert.deepEqual(g.groupByAliases, ["team", "cnt"]);
  assert.deepEqual(g.groupByAliasToAggregateType, { team: null, cnt: "Count" });
  assert.match(g.rewrittenQuery, /AS groupByItems/);
});

test("a range request runs over its own range only, not the whole container", async () => {
  const plan = (await planRequest("SELECT VALUE COUNT(1) FROM c")).json.queryInfo;
  const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();
  assert.equal(ranges.length, PARTITIONS);
  let total = 0;
  let nonEmpty = 0;
  for (const range of ranges) {
    const r = await rangeQuery(plan.rewrittenQuery, range.id);
    assert.equal(r.status, 200, show(r));
    assert.equal(r.json.Documents.length, 1, `one partial aggregate row from range ${range.id}`);
    const n = r.json.Documents[0][0].item;
    total += n;
    if (n > 0) nonEmpty++;
  }
  assert.equal(total, docs.length, "the partial counts add up to the container's");
  assert.ok(nonEmpty >= 2, "the documents are spread over several ranges");
});

test("a bare cross-partition query that needs a plan answers 400/1004 with the execution info", async () => {
  const r = await rangeQuery("SELECT * FROM c ORDER BY c.n");
  assert.equal(r.status, 400, show(r));
  assert.equal(r.headers["x-ms-substatus"], "1004");
  const info = JSON.parse(r.json.additionalErrorInfo);
  assert.deepEqual(info.queryInfo.orderBy, ["Ascending"]);
  assert.equal(info.partitionedQueryExecutionInfoVersion, 2);
  // A query that needs no plan still runs unscoped.
  const plain = await rangeQuery("SELECT c.id FROM c WHERE c.n = 4");
  assert.equal(plain.status, 200, show(plain));
  assert.equal(plain.json.Documents.length, 1);
});

test("ORDER BY over one field, ASC and DESC, gives the global order", async () => {
  const asc = [...docs].sort(byN);
  assert.deepEqual(ids(await all("SELECT * FROM c ORDER BY c.n")), ids(asc));
  assert.deepEqual(ids(await all("SELECT c.id FROM c ORDER BY c.n DESC")), ids(asc).reverse());
  assert.deepEqual(await all("SELECT VALUE c.n FROM c WHERE c.n < 10 ORDER BY c.n DESC"), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
});

test("ORDER BY over several fields gives the global order", async () => {
  const want = [...docs].sort((a, b) => (a.team < b.team ? -1 : a.team > b.team ? 1 : b.n - a.n));
  const got = await all("SELECT c.id, c.team, c.n FROM c ORDER BY c.team ASC, c.n DESC");
  assert.deepEqual(got, want.map((d) => ({ id: d.id, team: d.team, n: d.n })));
});

test("TOP and OFFSET LIMIT are applied to the global result", async () => {
  const asc = [...docs].sort(byN);
  assert.deepEqual(ids(await all("SELECT TOP 5 c.id FROM c ORDER BY c.n DESC")), ids(asc).reverse().slice(0, 5));
  assert.deepEqual(ids(await all("SELECT c.id FROM c ORDER BY c.n OFFSET 3 LIMIT 7")), ids(asc).slice(3, 10));
  const top = await all("SELECT TOP 7 c.id FROM c");
  assert.equal(top.length, 7);
  assert.equal(new Set(ids(top)).size, 7);
  const page = await all("SELECT c.id FROM c OFFSET 40 LIMIT 20");
  assert.equal(page.length, docs.length - 40);
});

test("DISTINCT, ordered and unordered, gives the global set", async () => {
  assert.deepEqual((await all("SELECT DISTINCT VALUE c.team FROM c")).sort(), [...TEAMS].sort());
  assert.deepEqual(await all("SELECT DISTINCT VALUE c.team FROM c ORDER BY c.team"), [...TEAMS].sort());
});

test("COUNT, SUM, MIN, MAX and AVG give the global values", async () => {
  const ns = docs.map((d) => d.n);
  const ss = docs.filter((d) => d.s !== undefined).map((d) => d.s).sort();
  assert.deepEqual(await all("SELECT VALUE COUNT(1) FROM c"), [docs.length]);
  assert.deepEqual(await all("SELECT VALUE COUNT(c.s) FROM c"), [ss.length]);
  assert.deepEqual(await all("SELECT VALUE SUM(c.n) FROM c"), [ns.reduce((a, b) => a + b, 0)]);
  assert.deepEqual(await all("SELECT VALUE MIN(c.n) FROM c WHERE c.n > 10"), [11]);
  assert.deepEqual(await all("SELECT VALUE MAX(c.s) FROM c"), [ss[ss.length - 1]]);
  assert.deepEqual(await all("SELECT VALUE AVG(c.n) FROM c"), [ns.reduce((a, b) => a + b, 0) / ns.length]);
  assert.deepEqual(await all("SELECT VALUE MIN(c.n) FROM c WHERE c.n > 1000"), []);
  // One document: every other range hands over an empty partial ({"count": 0}).
  assert.deepEqual(await all("SELECT VALUE MIN(c.n) FROM c WHERE c.id = 'd7'"), [docs[7].n]);
  assert.deepEqual(await all("SELECT VALUE MAX(c.s) FROM c WHERE c.id = 'd7'"), [docs[7].s]);
  assert.deepEqual(await all("SELECT COUNT(1) AS cnt, SUM(c.n) AS total FROM c WHERE c.team = 'red'"), [
    { cnt: 16, total: docs.filter((d) => d.team === "red").reduce((a, d) => a + d.n, 0) },
  ]);
});

test("GROUP BY gives one row per group with the global aggregates", async () => {
  const want = TEAMS.map((team) => {
    const g = docs.filter((d) => d.team === team);
    return { team, cnt: g.length, biggest: Math.max(...g.map((d) => d.n)) };
  }).sort((a, b) => (a.team < b.team ? -1 : 1));
  const got = await all("SELECT c.team, COUNT(1) AS cnt, MAX(c.n) AS biggest FROM c GROUP BY c.team");
  assert.deepEqual(got.sort((a, b) => (a.team < b.team ? -1 : 1)), want);
  const counts = await all("SELECT VALUE COUNT(1) FROM c GROUP BY c.team");
  assert.deepEqual(counts.sort(), want.map((w) => w.cnt).sort());
  const keys = await all("SELECT VALUE c.team FROM c GROUP BY c.team");
  assert.deepEqual(keys.sort(), [...TEAMS].sort());
});

test("a query plan for a query cosmolite cannot split across ranges is a clear 400", async () => {
  const r = await planRequest("SELECT COUNT(1) + 1 AS n FROM c");
  assert.equal(r.status, 400, show(r));
  assert.match(r.json.message, /cross-partition/);
});
