// Simulated latency (issue 15, behaviour 1): `--latency MS[:JITTER_MS]` holds
// every response MS (+- jitter) milliseconds without occupying the server, so
// many slow requests are in flight at once and none queues behind another.
// The server itself reports how many held responses it had in flight at once
// (logged at shutdown), which is the assertion that cannot be met by queueing;
// wall-clock bounds are only loose sanity checks (the machine is noisy).
import assert from "node:assert/strict";
import { test } from "node:test";

import { rawRequest, show, startCosmolite, uid } from "./harness.mjs";

/** The "at most N delayed responses were in flight at once" figure of a stopped server. */
function maxInFlight(srv) {
  const m = /at most (\d+) delayed responses were in flight at once/.exec(srv.stderr());
  assert.ok(m, `cosmolite logged its in-flight figure at shutdown; stderr:\n${srv.stderr().slice(-2000)}`);
  return Number(m[1]);
}

// 5 s of latency: long enough that all 32 requests arrive while the first is still held, even
// on a slow (sanitizer) build, so the in-flight figure does not depend on the machine's speed.
const HOLD_MS = 5000;

test("--latency 5000: 32 concurrent requests are all held at once, not queued one behind another", async (t) => {
  const srv = await startCosmolite(t, { args: ["--latency", String(HOLD_MS)] });
  const N = 32;
  const t0 = Date.now();
  // agent:false in rawRequest: each request has its own connection, so the
  // client does not serialise them either.
  const all = await Promise.all(Array.from({ length: N }, () => rawRequest(srv, { path: "/dbs" })));
  const elapsed = Date.now() - t0;
  for (const r of all) assert.equal(r.status, 200, show(r));
  // Queued one behind another they would need N x HOLD_MS; overlapping, about one.
  assert.ok(elapsed >= HOLD_MS, `no response came before its latency (${elapsed} ms)`);
  assert.ok(elapsed < (N * HOLD_MS) / 4, `${N} requests overlapped: ${elapsed} ms, queued would be ${N * HOLD_MS} ms`);
  await srv.stop();
  assert.ok(maxInFlight(srv) >= N, `the server held all ${N} responses at once: ${maxInFlight(srv)}`);
});

test("--latency 5000 --threads 1: one worker thread still holds 32 responses at once", async (t) => {
  // With a polling pool the held connections are suspended; with one thread
  // per connection each waits on its own. Either way none waits behind another.
  const srv = await startCosmolite(t, { args: ["--latency", String(HOLD_MS), "--threads", "1"] });
  const N = 32;
  const t0 = Date.now();
  const all = await Promise.all(Array.from({ length: N }, () => rawRequest(srv, { path: "/" })));
  const elapsed = Date.now() - t0;
  for (const r of all) assert.equal(r.status, 200, show(r));
  assert.ok(elapsed < (N * HOLD_MS) / 4, `${N} requests overlapped on one worker: ${elapsed} ms`);
  await srv.stop();
  assert.ok(maxInFlight(srv) >= N, `the server held all ${N} responses at once: ${maxInFlight(srv)}`);
});

test("--latency 200:100 with the SDK: every operation works and waits at least the latency minus jitter", async (t) => {
  const srv = await startCosmolite(t, { args: ["--latency", "200:100"] });
  const client = srv.client();
  const { database } = await client.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  for (let i = 0; i < 5; i++) {
    const t0 = Date.now();
    const { resource } = await container.item("missing", "p").read().catch((e) => ({ resource: e }));
    const elapsed = Date.now() - t0;
    assert.equal(resource, undefined, "a missing item reads as undefined");
    assert.ok(elapsed >= 100, `a point read waited at least 200 - 100 ms: ${elapsed} ms`);
  }
  const { resource: created } = await container.items.create({ id: "a", pk: "p", v: 1 });
  assert.equal(created.v, 1);
  const { resource: read } = await container.item("a", "p").read();
  assert.equal(read.v, 1);
  const { resources } = await container.items.query("SELECT * FROM c").fetchAll();
  assert.equal(resources.length, 1);
});

test("--latency refuses bad values with a message naming the option", async () => {
  for (const bad of ["x", "5:10", "-1", "600001", "10:"]) {
    await assert.rejects(
      startCosmolite(null, { args: ["--latency", bad] }),
      (e) => /--latency/.test(e.message) && /exited during startup \(code 2/.test(e.message),
      `--latency ${bad} is refused`,
    );
  }
});
