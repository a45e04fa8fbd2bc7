// Durability across restarts: SIGTERM + start, and kill -9 + start, on the
// same data dir. Every acknowledged write survives; container _rids, LSNs and
// change-feed continuation tokens stay valid.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { docKey as keyOf, drainChangeFeed, startCosmolite, uid } from "./harness.mjs";


function assertExactlyKeys(items, keys, what) {
  const got = items.map(keyOf).sort();
  assert.deepEqual(got, [...keys].sort(), what);
}

/** Reads every document of `expected` (Map key -> {id,pk,v,_etag?}) and checks it. */
async function assertAllPresent(container, expected, what) {
  for (const d of expected.values()) {
    const r = await container.item(d.id, d.pk).read();
    assert.equal(r.statusCode, 200, `${what}: ${keyOf(d)} is missing`);
    assert.equal(r.resource.v, d.v, `${what}: ${keyOf(d)} has the wrong version`);
    if (d._etag) assert.equal(r.resource._etag, d._etag, `${what}: ${keyOf(d)} _etag changed`);
  }
}

async function scenario(t, { partitions, hard }) {
  const srv = await startCosmolite(t, { partitions });
  const client = srv.client();
  const dbId = uid("db");
  const { database } = await client.databases.create({ id: dbId });
  const { container, resource: coll } = await database.containers.create({ id: "orders", partitionKey: "/pk" });
  const docs = new Map();
  const put = async (d) => {
    const { resource } = await container.items.upsert(d);
    docs.set(keyOf(d), { ...d, _etag: resource._etag });
    return resource;
  };
  for (let i = 0; i < 30; i++) await put({ id: `a${i}`, pk: `k${i % 5}`, v: 1 });

  const whole = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning() });
  const first = await drainChangeFeed(whole);
  assert.equal(first.items.length, 30);
  const wholeToken = first.last.continuationToken;
  const perKey = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning("k1") });
  const firstK1 = await drainChangeFeed(perKey);
  assert.equal(firstK1.items.length, 6);
  const keyToken = firstK1.last.continuationToken;
  const maxLsnBefore = Math.max(...first.items.map((x) => x._lsn));

  // Changes after the tokens were taken: new items, an update, a delete.
  const changed = [];
  for (let i = 0; i < 10; i++) {
    const d = { id: `b${i}`, pk: `k${i % 5}`, v: 1 };
    await put(d);
    changed.push(keyOf(d));
  }
  await put({ id: "a1", pk: "k1", v: 2 });
  changed.push(keyOf({ id: "a1", pk: "k1" }));
  await container.item("a2", "k2").delete();
  docs.delete(keyOf({ id: "a2", pk: "k2" }));

  if (hard) {
    await srv.kill9(); // right after the last acknowledged write
    await srv.start();
  } else {
    await srv.restart();
  }

  // A fresh client sees everything.
  const client2 = srv.client();
  const container2 = client2.database(dbId).container("orders");
  const { resource: coll2 } = await container2.read();
  assert.equal(coll2._rid, coll._rid, "the container _rid is stable across restarts");
  await assertAllPresent(container2, docs, hard ? "after kill -9" : "after SIGTERM restart");
  assert.equal((await container2.item("a2", "k2").read()).statusCode, 404, "a delete survives the restart");
  assert.equal((await container2.items.create({ id: "a3", pk: "k3", v: 0 }).catch((e) => e)).code, 409, "ids stay taken");

  // Old continuation tokens resume with neither loss nor duplicates.
  const resumed = container2.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(wholeToken) });
  const { items: after } = await drainChangeFeed(resumed);
  assertExactlyKeys(after, changed, "whole-container continuation after restart");
  const resumedKey = container2.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Continuation(keyToken) });
  const { items: afterK1 } = await drainChangeFeed(resumedKey);
  assertExactlyKeys(afterK1, changed.filter((k) => k.startsWith('"k1"|')), "per-key continuation after restart");

  // The iterator made before the restart, on the old client, carries on too.
  const { items: oldIt } = await drainChangeFeed(whole);
  assertExactlyKeys(oldIt, changed, "pre-restart iterator continues");

  // LSNs keep growing after the restart, so new writes follow old tokens.
  const fresh = await container2.items.create({ id: "c0", pk: "k0", v: 1 });
  const { items: tail } = await drainChangeFeed(resumed);
  assertExactlyKeys(tail, [keyOf({ id: "c0", pk: "k0" })], "write after restart reaches the resumed iterator");
  assert.ok(tail[0]._lsn > maxLsnBefore, "LSN after restart is beyond the LSNs before it");
  assert.equal(fresh.resource._etag, tail[0]._etag);

  // The database list and the container list survive as well.
  const dbs = (await client2.databases.readAll().fetchAll()).resources.map((d) => d.id);
  assert.ok(dbs.includes(dbId));
  const pkr = (await container2.readPartitionKeyRanges().fetchAll()).resources;
  assert.equal(pkr.length, partitions ?? 1, "partition key ranges survive the restart");
}

test("SIGTERM restart keeps every document and continuation tokens stay valid", async (t) => {
  await scenario(t, { hard: false });
});

test("kill -9 loses no acknowledged write and continuation tokens stay valid", async (t) => {
  await scenario(t, { hard: true });
});

test("kill -9 with 4 partition key ranges", async (t) => {
  await scenario(t, { partitions: 4, hard: true });
});

test("kill -9 under a stream of acknowledged writes loses none of them", async (t) => {
  const srv = await startCosmolite(t);
  const client = srv.client();
  const { database } = await client.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  const acked = [];
  let stop = false;
  const writers = [0, 1, 2].map(async (w) => {
    for (let i = 0; !stop && i < 10_000; i++) {
      try {
        await container.items.create({ id: `w${w}-${i}`, pk: `p${w}`, v: 1 });
        acked.push({ id: `w${w}-${i}`, pk: `p${w}` });
      } catch {
        return; // the server went away mid-request: not acknowledged
      }
    }
  });
  // Let some writes through, then pull the plug while requests are in flight.
  const deadline = Date.now() + 20_000;
  while (acked.length < 200 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.ok(acked.length >= 200, `only ${acked.length} writes acknowledged in 20 s`);
  await srv.kill9();
  stop = true;
  const ackedAtKill = acked.length;
  await srv.start();
  await Promise.all(writers);
  const c2 = srv.client().database(database.id).container("c");
  for (const d of acked) {
    const r = await c2.item(d.id, d.pk).read();
    assert.equal(r.statusCode, 200, `acknowledged write ${d.id} lost by kill -9`);
  }
  assert.ok(acked.length >= ackedAtKill);
});
