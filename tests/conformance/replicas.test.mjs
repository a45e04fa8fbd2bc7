// Replicas and session consistency (--replica-lag, docs/azure-session.md),
// refereed by the official SDK: the account reports Session; every write and
// read answers an Azure-shaped session token ("<range>:-1#<lsn>") and
// x-ms-content-path, so the SDK files tokens per container and range; a
// client with consistencyLevel "Session" reads its own writes through them;
// a read without a token (the SDK's default client, a raw request, or
// consistencyLevel Eventual) is served by a secondary that misses writes
// younger than the lag, in point reads, queries, the read feed and the
// change feed; a token no replica has reached gets 404/1002 after the wait;
// x-ms-consistency-level may only weaken.
//
// The lag of the main server is 10 minutes, so "younger than the lag" holds
// however slow the machine is; catching up is checked on a second server
// with a short lag, by polling with a generous bound.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { drainChangeFeed, drainQuery, pkHeaders, rawRequest, show, startCosmolite, uid } from "./harness.mjs";

const LAG_MS = 600000;
const TOKEN = /^\d+:-1#\d+$/;

let srv;
let session; // consistencyLevel "Session": sends the tokens it was given
let plain; // the SDK's default: sends no token
let eventual;
let dbId;

before(async () => {
  srv = await startCosmolite(null, { partitions: 2, args: ["--replica-lag", String(LAG_MS), "--replica-wait", "200"] });
  session = srv.client({ consistencyLevel: "Session" });
  plain = srv.client();
  eventual = srv.client({ consistencyLevel: "Eventual" });
  dbId = uid("db");
  await session.databases.create({ id: dbId });
});
after(async () => {
  await srv?.stop();
});

async function newContainer() {
  const id = uid("coll");
  const { resource } = await session.database(dbId).containers.create({ id, partitionKey: "/pk" });
  return {
    id,
    rid: resource._rid,
    s: session.database(dbId).container(id),
    p: plain.database(dbId).container(id),
    e: eventual.database(dbId).container(id),
  };
}

const docPath = (coll, id) => `/dbs/${dbId}/colls/${coll}/docs/${id}`;

test("GET / reports Session as the account's consistency", async () => {
  const { resource } = await session.getDatabaseAccount();
  assert.equal(resource.consistencyPolicy, "Session");
  const raw = await rawRequest(srv, { path: "/" });
  assert.equal(raw.json.userConsistencyPolicy.defaultConsistencyLevel, "Session");
});

test("writes and reads answer Azure-shaped session tokens and x-ms-content-path", async () => {
  const c = await newContainer();
  const w = await c.s.items.create({ id: "a", pk: "p1" });
  assert.match(w.headers["x-ms-session-token"] ?? "", TOKEN, "create's session token");
  assert.equal(w.headers["x-ms-content-path"], c.rid, "create's x-ms-content-path");
  const r = await rawRequest(srv, {
    path: docPath(c.id, "a"),
    headers: { ...pkHeaders("p1"), "x-ms-session-token": w.headers["x-ms-session-token"] },
  });
  assert.equal(r.status, 200, show(r));
  assert.match(r.headers["x-ms-session-token"] ?? "", TOKEN, show(r));
  assert.equal(r.headers["x-ms-content-path"], c.rid, show(r));

  // A query over the whole container answers every range's token, compound.
  const q = await rawRequest(srv, {
    method: "POST",
    path: `/dbs/${dbId}/colls/${c.id}/docs`,
    headers: {
      "content-type": "application/query+json",
      "x-ms-documentdb-isquery": "true",
      "x-ms-session-token": w.headers["x-ms-session-token"],
    },
    body: { query: "SELECT * FROM c" },
  });
  assert.equal(q.status, 200, show(q));
  assert.match(q.headers["x-ms-session-token"] ?? "", /^0:-1#\d+,1:-1#\d+$/, show(q));
});

test("the SDK with Session consistency reads its own writes through its tokens", async () => {
  const c = await newContainer();
  for (let i = 0; i < 6; i++) await c.s.items.create({ id: `d${i}`, pk: `p${i}`, v: 1 });
  const read = await c.s.item("d3", "p3").read();
  assert.equal(read.statusCode, 200);
  assert.equal(read.resource.v, 1);

  await c.s.item("d3", "p3").replace({ id: "d3", pk: "p3", v: 2 });
  assert.equal((await c.s.item("d3", "p3").read()).resource.v, 2, "point read after replace");

  const q = (await drainQuery(c.s.items.query("SELECT c.id, c.v FROM c"))).items;
  assert.equal(q.length, 6, "cross-partition query sees every create");
  assert.equal(q.find((d) => d.id === "d3").v, 2, "and the replace");

  const all = await c.s.items.readAll().fetchAll();
  assert.equal(all.resources.length, 6, "read feed");

  const feed = (await drainChangeFeed(
    c.s.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() }),
  )).items;
  assert.equal(feed.length, 6, "change feed from the beginning");

  await c.s.item("d0", "p0").delete();
  const gone = await c.s.item("d0", "p0").read();
  assert.equal(gone.statusCode, 404, "read after delete");
});

test("read-your-writes holds for names too long to repeat in x-ms-alt-content-path", async () => {
  const id = `c${"x".repeat(150)}`;
  await session.database(dbId).containers.create({ id, partitionKey: "/pk" });
  const s = session.database(dbId).container(id);
  const w = await s.items.create({ id: "long", pk: "p1" });
  assert.equal(w.headers["x-ms-alt-content-path"], undefined, "left out, not cut");
  assert.equal((await s.item("long", "p1").read()).statusCode, 200, "the SDK sent its token");
});

test("a read without a session token misses writes younger than the lag", async () => {
  const c = await newContainer();
  await c.s.items.create({ id: "new", pk: "p1", v: 1 });

  const point = await c.p.item("new", "p1").read();
  assert.equal(point.statusCode, 404, "the default SDK client sends no token: a secondary answers");

  const raw = await rawRequest(srv, { path: docPath(c.id, "new"), headers: pkHeaders("p1") });
  assert.equal(raw.status, 404, `raw read without a token: ${show(raw)}`);
  const token = (await c.s.items.upsert({ id: "new", pk: "p1", v: 2 })).headers["x-ms-session-token"];
  const withToken = await rawRequest(srv, {
    path: docPath(c.id, "new"),
    headers: { ...pkHeaders("p1"), "x-ms-session-token": token },
  });
  assert.equal(withToken.status, 200, `raw read with the write's token: ${show(withToken)}`);
  assert.equal(withToken.json.v, 2);

  const q = (await drainQuery(c.p.items.query("SELECT * FROM c"))).items;
  assert.deepEqual(q, [], "query without a token");
  const feed = (await drainChangeFeed(
    c.p.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() }),
  )).items;
  assert.deepEqual(feed, [], "change feed without a token");
  const all = await c.p.items.readAll().fetchAll();
  assert.deepEqual(all.resources, [], "read feed without a token");
});

test("a stale read of an updated or deleted document sees the version before", async (t) => {
  // A restart starts with caught-up secondaries (the journal is memory only):
  // the documents written before it are applied, the writes after it are not.
  const own = await startCosmolite(t, { args: ["--replica-lag", String(LAG_MS)] });
  const { database } = await own.client().databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  await container.items.create({ id: "u", pk: "p1", v: 1 });
  await container.items.create({ id: "x", pk: "p2", v: 1 });
  await container.items.create({ id: "q", pk: "p3", v: 1 });
  await own.restart();
  const s = own.client({ consistencyLevel: "Session" }).database(database.id).container("c");
  const p = own.client().database(database.id).container("c");
  assert.equal((await p.item("u", "p1").read()).resource.v, 1, "applied before the restart");
  await s.item("u", "p1").replace({ id: "u", pk: "p1", v: 2 });
  await s.item("u", "p1").replace({ id: "u", pk: "p1", v: 3 });
  await s.item("x", "p2").delete();
  await s.items.create({ id: "n", pk: "p4", v: 1 });
  // More documents the secondary lacks, spread over the scan order.
  for (let i = 0; i < 12; i++) await s.items.create({ id: `h${i}`, pk: `h${i}`, v: 1 });

  assert.equal((await s.item("u", "p1").read()).resource.v, 3, "Session sees the last replace");
  assert.equal((await s.item("x", "p2").read()).statusCode, 404, "Session sees the delete");
  const stale = await p.item("u", "p1").read();
  assert.equal(stale.statusCode, 200);
  assert.equal(stale.resource.v, 1, "the secondary has neither replace");
  const ghost = await p.item("x", "p2").read();
  assert.equal(ghost.statusCode, 200, "nor the delete");
  assert.equal(ghost.resource.v, 1);
  const q = (await drainQuery(p.items.query("SELECT c.id, c.v FROM c"))).items;
  assert.deepEqual(
    q.map((d) => `${d.id}=${d.v}`).sort(),
    ["q=1", "u=1"],
    "a query on the secondary: the old version of u, no n (x's delete is not undone in scans)",
  );
  const paged = (await drainQuery(p.items.query("SELECT c.id, c.v FROM c", { maxItemCount: 1 }))).items;
  assert.deepEqual(
    paged.map((d) => `${d.id}=${d.v}`).sort(),
    ["q=1", "u=1"],
    "one row a page: the hidden documents still count as scanned, so no row repeats",
  );
  const fresh = (await drainQuery(s.items.query("SELECT c.id, c.v FROM c"))).items;
  assert.deepEqual(
    fresh.map((d) => `${d.id}=${d.v}`).filter((t) => !t.startsWith("h")).sort(),
    ["n=1", "q=1", "u=3"],
  );
  assert.equal(fresh.length, 15);
});

test("consistencyLevel Eventual ignores the session token; Strong is refused", async () => {
  const c = await newContainer();
  const token = (await c.s.items.create({ id: "e", pk: "p1" })).headers["x-ms-session-token"];
  const r = await c.e.item("e", "p1").read({ sessionToken: token });
  assert.equal(r.statusCode, 404, "Eventual is served by the lagging secondary");
  const raw = await rawRequest(srv, {
    path: docPath(c.id, "e"),
    headers: { ...pkHeaders("p1"), "x-ms-session-token": token, "x-ms-consistency-level": "Eventual" },
  });
  assert.equal(raw.status, 404, show(raw));

  for (const level of ["Strong", "BoundedStaleness"]) {
    const strong = await rawRequest(srv, {
      path: docPath(c.id, "e"),
      headers: { ...pkHeaders("p1"), "x-ms-consistency-level": level },
    });
    assert.equal(strong.status, 400, `${level}: ${show(strong)}`);
    assert.match(strong.json.message, /only weaken/);
  }
  await assert.rejects(
    srv.client({ consistencyLevel: "Strong" }).database(dbId).container(c.id).item("e", "p1").read(),
    (e) => e.code === 400,
  );
  const bogus = await rawRequest(srv, {
    path: docPath(c.id, "e"),
    headers: { ...pkHeaders("p1"), "x-ms-consistency-level": "Linearizable" },
  });
  assert.equal(bogus.status, 400, show(bogus));
});

test("a session token no replica has reached answers 404/1002 ReadSessionNotAvailable", async () => {
  const c = await newContainer();
  await c.s.items.create({ id: "t", pk: "p1" });
  const raw = await rawRequest(srv, {
    path: docPath(c.id, "t"),
    headers: { ...pkHeaders("p1"), "x-ms-session-token": "0:-1#999999,1:-1#999999" },
  });
  assert.equal(raw.status, 404, show(raw));
  assert.equal(raw.headers["x-ms-substatus"], "1002", show(raw));

  // The SDK's SessionRetryPolicy retries once without the token: a secondary answers.
  const r = await c.s.item("t", "p1").read({ sessionToken: "0:0#999999" });
  assert.equal(r.statusCode, 404);
  assert.notEqual(r.substatus, 1002, "the retry got a plain 404, not 1002");
});

test("a malformed session token is refused with 400 naming it", async () => {
  const c = await newContainer();
  for (const bad of ["nonsense", "0:-1#x", "0:", ":5"]) {
    const raw = await rawRequest(srv, {
      path: docPath(c.id, "z"),
      headers: { ...pkHeaders("p1"), "x-ms-session-token": bad },
    });
    assert.equal(raw.status, 400, `${bad}: ${show(raw)}`);
    assert.match(raw.json.message, /x-ms-session-token/);
  }
});

test("the secondaries catch up: a write older than the lag is read without a token", async (t) => {
  const fast = await startCosmolite(t, { args: ["--replica-lag", "300"] });
  const c = fast.client({ consistencyLevel: "Session" });
  const { database } = await c.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  await container.items.create({ id: "late", pk: "p1", v: 1 });
  const path = `/dbs/${database.id}/colls/c/docs/late`;
  let r;
  for (let i = 0; i < 300; i++) {
    r = await rawRequest(fast, { path, headers: pkHeaders("p1") });
    if (r.status === 200) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(r.status, 200, `caught up within 30 s: ${show(r)}`);
  const feed = (await drainChangeFeed(
    fast.client().database(database.id).container("c").items.getChangeFeedIterator({
      changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
    }),
  )).items;
  assert.equal(feed.length, 1, "the change feed has it too");
});

test("a change-feed iterator without tokens gets every write once, after the lag", async (t) => {
  const fast = await startCosmolite(t, { partitions: 2, args: ["--replica-lag", "300"] });
  const { database } = await fast.client().databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Now() });
  await it.readNext(); // pins "now" before the writes
  const want = new Set();
  for (let i = 0; i < 20; i++) {
    await container.items.upsert({ id: `d${i}`, pk: `p${i % 5}` });
    want.add(`d${i}`);
  }
  const seen = [];
  for (let i = 0; i < 600 && seen.length < want.size; i++) {
    const r = await it.readNext();
    if (r.statusCode === 200) seen.push(...r.result.map((d) => d.id));
    else await new Promise((res) => setTimeout(res, 50));
  }
  assert.deepEqual([...seen].sort(), [...want].sort(), "every write exactly once");
});

test("without --replica-lag every read sees every write, token or not", async (t) => {
  const fresh = await startCosmolite(t);
  const c = fresh.client();
  const { database } = await c.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  const w = await container.items.create({ id: "now", pk: "p1" });
  assert.match(w.headers["x-ms-session-token"] ?? "", TOKEN);
  const r = await rawRequest(fresh, { path: `/dbs/${database.id}/colls/c/docs/now`, headers: pkHeaders("p1") });
  assert.equal(r.status, 200, show(r));
  const strong = await rawRequest(fresh, {
    path: `/dbs/${database.id}/colls/c/docs/now`,
    headers: { ...pkHeaders("p1"), "x-ms-consistency-level": "Strong" },
  });
  assert.equal(strong.status, 400, `consistency may only weaken here too: ${show(strong)}`);
});
