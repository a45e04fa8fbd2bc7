// Fault injection (issue 3): the runtime admin API /_admin/faults and the
// --fault start-up option. Throttles through the official SDK (which must
// retry 429 transparently), every other fault by raw HTTP so the exact status,
// headers and dropped connections are visible. Above all: an injected fault
// never half-applies a write.
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";

import {
  adminRequest,
  clearFaults,
  getFaults,
  pkHeaders,
  rawRequest,
  setFaults,
  show,
  startCosmolite,
  uid,
} from "./harness.mjs";

let srv;
let client;
let database;
const DB = uid("fdb");
const COLL = "orders";
const OTHER = "other";
const DOCS = `/dbs/${DB}/colls/${COLL}/docs`;

before(async () => {
  srv = await startCosmolite(null);
  client = srv.client();
  ({ database } = await client.databases.create({ id: DB }));
  await database.containers.create({ id: COLL, partitionKey: "/pk" });
  await database.containers.create({ id: OTHER, partitionKey: "/pk" });
});
after(async () => {
  await srv?.stop();
});
beforeEach(async () => {
  if (srv) await clearFaults(srv);
});

const docUrl = (id, coll = COLL) => `/dbs/${DB}/colls/${coll}/docs/${encodeURIComponent(id)}`;

function rawCreate(doc, coll = COLL) {
  return rawRequest(srv, { method: "POST", path: `/dbs/${DB}/colls/${coll}/docs`, headers: pkHeaders(doc.pk), body: doc });
}
function rawRead(id, pk, coll = COLL) {
  return rawRequest(srv, { path: docUrl(id, coll), headers: pkHeaders(pk) });
}

/** Asserts that (pk, id) is absent (404) or present (200), read with no faults active. */
async function assertStored(id, pk, present, what, coll = COLL) {
  const r = await rawRead(id, pk, coll);
  assert.equal(r.status, present ? 200 : 404, `${what}: ${id} should ${present ? "" : "not "}exist: ${show(r)}`);
  return r;
}

/** The rule listing entry i, checked for its counters. */
function ruleAt(listing, i) {
  assert.ok(Array.isArray(listing?.rules) && listing.rules.length > i, `fault listing: ${JSON.stringify(listing)}`);
  return listing.rules[i];
}

test("429 on writes: the SDK retries after x-ms-retry-after-ms and succeeds; the doc exists once", async () => {
  await setFaults(srv, [{ status: 429, op: "write", container: COLL, count: 3, retryAfterMs: 10 }]);
  const container = database.container(COLL);
  const t0 = Date.now();
  const res = await container.items.create({ id: "throttled", pk: "a", v: 1 });
  assert.equal(res.statusCode, 201);
  assert.equal(
    Number(res.headers["x-ms-throttle-retry-count"]),
    3,
    `the SDK saw three 429s before the 201 (headers ${JSON.stringify(res.headers)})`,
  );
  assert.ok(Date.now() - t0 >= 30, "three retries waited at least 3 x 10 ms");
  const rule = ruleAt(await getFaults(srv), 0);
  assert.equal(rule.fired, 3, `the rule fired three times: ${JSON.stringify(rule)}`);
  assert.equal(rule.remaining, 0, "count is used up");
  const { resource } = await container.item("throttled", "a").read();
  assert.equal(resource.v, 1);
  // The retries did not apply the write more than once: a create would 409.
  const feed = await rawRequest(srv, { path: DOCS, headers: { "a-im": "Incremental Feed", ...pkHeaders("a") } });
  assert.equal(feed.status, 200, show(feed));
  assert.deepEqual(feed.json.Documents.map((d) => d.id), ["throttled"], "one create in the change feed");
});

test("429 on patch and batch: the SDK's retries apply an incr and a batch exactly once", async () => {
  const container = database.container(COLL);
  await container.items.create({ id: "counter", pk: "z", n: 0 });
  await setFaults(srv, [{ status: 429, op: "patch", container: COLL, count: 2, retryAfterMs: 5 }]);
  const p = await container.item("counter", "z").patch([{ op: "incr", path: "/n", value: 1 }]);
  assert.equal(p.statusCode, 200);
  assert.equal(Number(p.headers["x-ms-throttle-retry-count"]), 2, "two throttles before the 200");
  assert.equal(p.resource.n, 1, "the increment was applied once");
  assert.equal((await container.item("counter", "z").read()).resource.n, 1);

  await setFaults(srv, [{ status: 429, op: "batch", container: COLL, count: 2, retryAfterMs: 5 }]);
  const b = await container.items.batch(
    [
      { operationType: "Patch", id: "counter", resourceBody: { operations: [{ op: "incr", path: "/n", value: 10 }] } },
      { operationType: "Create", resourceBody: { id: "batched", pk: "z" } },
    ],
    "z",
  );
  assert.equal(b.code, 200, JSON.stringify(b.result));
  assert.equal((await container.item("counter", "z").read()).resource.n, 11, "the batch was applied once");
  assert.equal(ruleAt(await getFaults(srv), 0).fired, 2);
});

test("429 by raw HTTP: status, x-ms-retry-after-ms, substatus 3200 when asked, JSON error; nothing applied", async () => {
  // An injected 429 is 429/3092 (busy at random) unless the rule asks for 3200 (RU exhaustion).
  await setFaults(srv, [{ status: 429, op: "write", container: COLL, count: 1, retryAfterMs: 25, substatus: 3200 }]);
  const r = await rawCreate({ id: "raw429", pk: "a" });
  assert.equal(r.status, 429, show(r));
  assert.equal(r.headers["x-ms-retry-after-ms"], "25", "retry-after as configured");
  assert.equal(r.headers["x-ms-substatus"], "3200", "the service's RU-exhaustion substatus");
  assert.equal(r.json?.code, "TooManyRequests", r.text);
  await assertStored("raw429", "a", false, "after a 429");
  const again = await rawCreate({ id: "raw429", pk: "a" });
  assert.equal(again.status, 201, `count 1 is used up: ${show(again)}`);
  await setFaults(srv, [{ status: 429, op: "write", container: COLL, count: 1 }]);
  const busy = await rawCreate({ id: "raw429-busy", pk: "a" });
  assert.equal(busy.status, 429, show(busy));
  assert.equal(busy.headers["x-ms-substatus"], "3092", "an injected throttle by default: busy, not RU exhaustion");
  await assertStored("raw429-busy", "a", false, "after a 429");
});

test("503, 408 and 449 before the write: answered as configured, and nothing is applied", async () => {
  for (const status of [503, 408, 449]) {
    const id = `before-${status}`;
    await setFaults(srv, [{ status, op: "write", container: COLL, count: 1 }]);
    const r = await rawCreate({ id, pk: "b", v: 1 });
    assert.equal(r.status, status, `${status}: ${show(r)}`);
    assert.equal(typeof r.json?.code, "string", `${status}: JSON error body: ${r.text}`);
    await assertStored(id, "b", false, `after an injected ${status}`);
    // Upsert, replace and delete are writes too and stay unapplied.
    assert.equal((await rawCreate({ id, pk: "b", v: 1 })).status, 201);
    await setFaults(srv, [{ status, op: "write", container: COLL, count: 2 }]);
    const rep = await rawRequest(srv, { method: "PUT", path: docUrl(id), headers: pkHeaders("b"), body: { id, pk: "b", v: 2 } });
    assert.equal(rep.status, status, `${status} on replace: ${show(rep)}`);
    const del = await rawRequest(srv, { method: "DELETE", path: docUrl(id), headers: pkHeaders("b") });
    assert.equal(del.status, status, `${status} on delete: ${show(del)}`);
    const after = await assertStored(id, "b", true, `after injected ${status}s on replace and delete`);
    assert.equal(after.json.v, 1, `${status}: the replace was not applied`);
  }
});

test("drop before the write: the connection is cut and the doc does not exist", async () => {
  await setFaults(srv, [{ drop: true, op: "write", container: COLL, count: 1 }]);
  await assert.rejects(rawCreate({ id: "dropped-before", pk: "c" }), (e) => {
    assert.ok(["ECONNRESET", "EPIPE"].includes(e.code) || /socket hang up/.test(e.message), `connection error: ${e.code} ${e.message}`);
    return true;
  });
  await assertStored("dropped-before", "c", false, "drop when=before");
});

test("drop and 408 with when=after: the write is applied, the client never learns it", async () => {
  await setFaults(srv, [{ drop: true, op: "write", container: COLL, count: 1, when: "after" }]);
  await assert.rejects(rawCreate({ id: "dropped-after", pk: "c", v: 1 }), (e) => {
    assert.ok(["ECONNRESET", "EPIPE"].includes(e.code) || /socket hang up/.test(e.message), `connection error: ${e.code} ${e.message}`);
    return true;
  });
  const r = await assertStored("dropped-after", "c", true, "drop when=after");
  assert.equal(r.json.v, 1);

  await setFaults(srv, [{ status: 408, op: "write", container: COLL, count: 1, when: "after" }]);
  const t = await rawCreate({ id: "timeout-after", pk: "c", v: 2 });
  assert.equal(t.status, 408, show(t));
  await assertStored("timeout-after", "c", true, "408 when=after");
  // The retry a client would make sees its own earlier write.
  const retry = await rawCreate({ id: "timeout-after", pk: "c", v: 2 });
  assert.equal(retry.status, 409, `a retried create after an applied 408 conflicts: ${show(retry)}`);
});

test("when=after is refused for statuses that promise nothing was applied", async () => {
  for (const status of [429, 503, 449]) {
    const r = await adminRequest(srv, "PUT", "faults", { rules: [{ status, when: "after" }] });
    assert.equal(r.status, 400, `${status} when=after: ${show(r)}`);
  }
});

test("count: the next N matching requests fail, then the rule is used up", async () => {
  await setFaults(srv, [{ status: 503, op: "read", container: COLL, count: 2 }]);
  assert.equal((await rawCreate({ id: "counted", pk: "d" })).status, 201, "writes are not matched by op=read");
  const statuses = [];
  for (let i = 0; i < 4; i++) statuses.push((await rawRead("counted", "d")).status);
  assert.deepEqual(statuses, [503, 503, 200, 200]);
  const rule = ruleAt(await getFaults(srv), 0);
  assert.equal(rule.fired, 2);
  assert.equal(rule.remaining, 0);
});

test("rules match only their operation kind and container", async () => {
  assert.equal((await rawCreate({ id: "scoped", pk: "e" })).status, 201);
  assert.equal((await rawCreate({ id: "scoped", pk: "e" }, OTHER)).status, 201);
  await setFaults(srv, [{ status: 503, op: "read", container: OTHER }]);
  assert.equal((await rawRead("scoped", "e")).status, 200, "another container is not affected");
  assert.equal((await rawRead("scoped", "e", OTHER)).status, 503, "the named container is");
  assert.equal((await rawCreate({ id: "scoped2", pk: "e" }, OTHER)).status, 201, "writes are not op=read");

  await setFaults(srv, [{ status: 503, op: "query+changefeed", container: COLL }]);
  assert.equal((await rawRead("scoped", "e")).status, 200, "a point read is not a query or feed");
  const q = await rawRequest(srv, {
    method: "POST",
    path: DOCS,
    headers: { "content-type": "application/query+json", "x-ms-documentdb-isquery": "True", ...pkHeaders("e") },
    body: { query: "SELECT * FROM c" },
  });
  assert.equal(q.status, 503, `query: ${show(q)}`);
  const cf = await rawRequest(srv, { path: DOCS, headers: { "a-im": "Incremental Feed", ...pkHeaders("e") } });
  assert.equal(cf.status, 503, `change feed: ${show(cf)}`);

  await setFaults(srv, [{ status: 503, op: "patch+batch", container: COLL }]);
  const p = await rawRequest(srv, { method: "PATCH", path: docUrl("scoped"), headers: pkHeaders("e"), body: [{ op: "set", path: "/x", value: 1 }] });
  assert.equal(p.status, 503, `patch: ${show(p)}`);
  const b = await rawRequest(srv, {
    method: "POST",
    path: DOCS,
    headers: { "x-ms-cosmos-is-batch-request": "True", "x-ms-cosmos-batch-atomic": "True", ...pkHeaders("e") },
    body: [{ operationType: "Create", resourceBody: { id: "in-batch", pk: "e" } }],
  });
  assert.equal(b.status, 503, `batch: ${show(b)}`);
  await assertStored("in-batch", "e", false, "after a 503 on the batch");
  const doc = await assertStored("scoped", "e", true, "after a 503 on the patch");
  assert.equal(doc.json.x, undefined, "the patch was not applied");
  assert.equal((await rawCreate({ id: "scoped3", pk: "e" })).status, 201, "a plain write is not patch or batch");
});

test("probability with a seed: the same seed gives the same faults, and some requests get through", async () => {
  assert.equal((await rawCreate({ id: "dice", pk: "f" })).status, 201);
  const roll = async () => {
    await setFaults(srv, [{ status: 503, op: "read", container: COLL, probability: 0.5 }], 42);
    const out = [];
    for (let i = 0; i < 24; i++) out.push((await rawRead("dice", "f")).status);
    return out;
  };
  const first = await roll();
  const second = await roll();
  assert.deepEqual(second, first, "same seed, same request sequence, same faults");
  const failed = first.filter((s) => s === 503).length;
  assert.ok(failed > 0 && failed < first.length, `p=0.5 over 24 reads fails some, not all: ${first.join(",")}`);
  assert.ok(first.every((s) => s === 503 || s === 200), first.join(","));
  const rule = ruleAt(await getFaults(srv), 0);
  assert.equal(rule.fired, failed, "fired counts the injected faults");
});

test("delay: the request is slowed down and still succeeds", async () => {
  assert.equal((await rawCreate({ id: "slow", pk: "g" })).status, 201);
  await setFaults(srv, [{ delayMs: 300, op: "read", container: COLL, count: 1 }]);
  const t0 = Date.now();
  const r = await rawRead("slow", "g");
  const ms = Date.now() - t0;
  assert.equal(r.status, 200, show(r));
  assert.ok(ms >= 280, `the read took ${ms} ms, expected >= 300`);
  const t1 = Date.now();
  await rawRead("slow", "g");
  assert.ok(Date.now() - t1 < 250, "count 1: the next read is not delayed");
});

test("the admin API validates rules and lists and clears them", async () => {
  const bad = [
    { rules: [{ status: 404 }] },
    { rules: [{ status: 429, probability: 2 }] },
    { rules: [{ status: 429, op: "nonsense" }] },
    { rules: [{ status: 429, bogus: 1 }] },
    { rules: [{ op: "write" }] },
    { rules: [{ status: 429, count: 0 }] },
    { rules: "nope" },
    { seed: "x", rules: [] },
  ];
  for (const body of bad) {
    const r = await adminRequest(srv, "PUT", "faults", body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${show(r)}`);
    assert.equal(typeof r.json?.message, "string");
  }
  const notJson = await rawRequest(srv, { method: "PUT", path: "/_admin/faults", body: "{rules:" });
  assert.equal(notJson.status, 400, show(notJson));
  assert.deepEqual((await getFaults(srv)).rules, [], "rejected rule sets change nothing");

  await setFaults(srv, [
    { status: 429, op: "write", container: COLL, probability: 0.25, retryAfterMs: 7 },
    { drop: true, op: "read" },
  ]);
  const listed = (await getFaults(srv)).rules;
  assert.equal(listed.length, 2, JSON.stringify(listed));
  assert.equal(listed[0].status, 429);
  assert.equal(listed[0].container, COLL);
  assert.equal(listed[0].retryAfterMs, 7);
  assert.equal(listed[1].drop, true);
  const cleared = await clearFaults(srv);
  assert.deepEqual(cleared.rules, [], "DELETE answers the (empty) listing");
  assert.deepEqual((await getFaults(srv)).rules, []);

  const unsigned = await rawRequest(srv, { method: "PUT", path: "/_admin/faults", body: { rules: [] }, sign: false });
  assert.equal(unsigned.status, 401, `the admin API needs the key: ${show(unsigned)}`);
  const unknown = await adminRequest(srv, "GET", "nothing");
  assert.equal(unknown.status, 404, show(unknown));
});

test("a catch-all rule (op=any, no container) does not lock out the admin API itself", async () => {
  await setFaults(srv, [{ status: 503, op: "any", count: 5 }]);
  try {
    const r = await adminRequest(srv, "GET", "faults");
    assert.equal(r.status, 200, `GET /_admin/faults under an op=any rule: ${show(r)}`);
    const d = await adminRequest(srv, "DELETE", "faults");
    assert.equal(d.status, 200, `DELETE /_admin/faults under an op=any rule: ${show(d)}`);
  } finally {
    // Whatever happened, leave no rule behind (the count bounds a broken server).
    for (let i = 0; i < 6; i++) {
      if ((await adminRequest(srv, "DELETE", "faults")).status === 200) break;
    }
  }
});

test("--fault at start-up: the rule is active from the first request", async (t) => {
  const s2 = await startCosmolite(t, {
    memory: true,
    args: ["--fault", "status=503,op=read,coll=orders,count=2", "--fault", "status=429,op=write,coll=orders,count=1,retry-after=15", "--fault-seed", "9"],
  });
  const db = "startup";
  let r = await rawRequest(s2, { method: "POST", path: "/dbs", body: { id: db } });
  assert.equal(r.status, 201, show(r));
  r = await rawRequest(s2, { method: "POST", path: `/dbs/${db}/colls`, body: { id: "orders", partitionKey: { paths: ["/pk"], kind: "Hash", version: 2 } } });
  assert.equal(r.status, 201, `metadata is not op=read/write: ${show(r)}`);
  const docs = `/dbs/${db}/colls/orders/docs`;
  r = await rawRequest(s2, { method: "POST", path: docs, headers: pkHeaders("a"), body: { id: "x", pk: "a" } });
  assert.equal(r.status, 429, show(r));
  assert.equal(r.headers["x-ms-retry-after-ms"], "15");
  r = await rawRequest(s2, { method: "POST", path: docs, headers: pkHeaders("a"), body: { id: "x", pk: "a" } });
  assert.equal(r.status, 201, show(r));
  const reads = [];
  for (let i = 0; i < 3; i++) reads.push((await rawRequest(s2, { path: `${docs}/x`, headers: pkHeaders("a") })).status);
  assert.deepEqual(reads, [503, 503, 200]);
  const listing = await getFaults(s2);
  assert.equal(listing.rules.length, 2, JSON.stringify(listing));

  // Through the SDK the start-up 429 is invisible.
  const s3 = await startCosmolite(t, { memory: true, args: ["--fault", "status=429,op=write,count=2,retry-after=5"] });
  const c3 = s3.client();
  const { database: d3 } = await c3.databases.create({ id: "sdk" });
  const { container } = await d3.containers.create({ id: "c", partitionKey: "/pk" });
  const created = await container.items.create({ id: "y", pk: "b" });
  assert.equal(created.statusCode, 201);
});

test("a bad --fault spec stops start-up with a message naming it", async () => {
  await assert.rejects(startCosmolite(null, { memory: true, args: ["--fault", "status=999"] }), (e) => {
    assert.match(e.message, /status/, e.message);
    return true;
  });
  await assert.rejects(startCosmolite(null, { memory: true, args: ["--fault", "status=429,when=after"] }), /after/);
});
