// Regions and failover (issue 15, behaviour 5; docs/azure-regions.md):
// `--regions "A=HOST:PORT,B=HOST:PORT"` serves every region on its own address
// from one process over one store. GET / lists the write region in
// writableLocations and every region in readableLocations; a write sent to a
// read region answers 403/3 (WriteForbidden); POST /_admin/failover moves the
// write region, and the official SDK (endpoint discovery on, as users run it)
// follows it. The server's own per-region counters (GET /_admin/regions) say
// which region served what, so the assertions do not rest on the client's word.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";

import { httpCode, rawRequest, show, startCosmolite, uid } from "./harness.mjs";

const WEST = "West Europe";
const NORTH = "North Europe";
const SPEC = `${WEST}=127.0.0.1:0,${NORTH}=127.0.0.1:0`;

/** The region endpoints the server advertises, by name (from GET / on the first region). */
async function endpoints(srv) {
  const r = await rawRequest(srv, { path: "/" });
  assert.equal(r.status, 200, show(r));
  return Object.fromEntries(r.json.readableLocations.map((l) => [l.name, l.databaseAccountEndpoint]));
}

/** srv, but talking to the region behind `endpoint` (rawRequest uses srv.port). */
function at(srv, endpoint) {
  return { ...srv, key: srv.key, port: Number(new URL(endpoint).port) };
}

async function regionState(srv) {
  const r = await rawRequest(srv, { path: "/_admin/regions" });
  assert.equal(r.status, 200, show(r));
  return { write: r.json.writeRegion, by: Object.fromEntries(r.json.regions.map((x) => [x.name, x])) };
}

async function failover(srv, writeRegion) {
  const r = await rawRequest(srv, { method: "POST", path: "/_admin/failover", body: { writeRegion } });
  assert.equal(r.status, 200, show(r));
  assert.equal(r.json.writeRegion, writeRegion);
  return r;
}

test("--regions: GET / in every region lists the write region as writable and all regions as readable, write region first", async (t) => {
  const srv = await startCosmolite(t, { memory: true, regions: SPEC });
  const eps = await endpoints(srv);
  assert.deepEqual(Object.keys(eps), [WEST, NORTH]);
  assert.notEqual(eps[WEST], eps[NORTH], "each region has its own address");
  assert.equal(eps[WEST], `http://127.0.0.1:${srv.port}/`, "the first region is on the port-file port");
  for (const ep of Object.values(eps)) {
    const r = await rawRequest(at(srv, ep), { path: "/" });
    assert.equal(r.status, 200, show(r));
    assert.deepEqual(r.json.writableLocations, [{ name: WEST, databaseAccountEndpoint: eps[WEST] }]);
    assert.deepEqual(r.json.readableLocations, [
      { name: WEST, databaseAccountEndpoint: eps[WEST] },
      { name: NORTH, databaseAccountEndpoint: eps[NORTH] },
    ]);
    assert.equal(r.json.enableMultipleWriteLocations, false);
    assert.equal(r.json.userConsistencyPolicy.defaultConsistencyLevel, "Session");
  }
});

test("--regions: a write sent to a read region answers 403 sub-status 3 WriteForbidden; reads and queries work there", async (t) => {
  const srv = await startCosmolite(t, { memory: true, regions: SPEC });
  const eps = await endpoints(srv);
  const north = at(srv, eps[NORTH]);
  const refused = await rawRequest(north, { method: "POST", path: "/dbs", body: { id: "shop" } });
  assert.equal(refused.status, 403, show(refused));
  assert.equal(refused.headers["x-ms-substatus"], "3", show(refused));
  assert.match(refused.json.message, /write region is 'West Europe'/);
  const made = await rawRequest(srv, { method: "POST", path: "/dbs", body: { id: "shop" } });
  assert.equal(made.status, 201, show(made));
  // The store is shared: the read region sees the database at once, by read and by query.
  const read = await rawRequest(north, { path: "/dbs/shop" });
  assert.equal(read.status, 200, show(read));
  const q = await rawRequest(north, {
    method: "POST",
    path: "/dbs",
    headers: { "content-type": "application/query+json", "x-ms-documentdb-isquery": "true" },
    body: { query: "SELECT * FROM root r WHERE r.id = 'shop'", parameters: [] },
  });
  assert.equal(q.status, 200, show(q));
  assert.equal(q.json.Databases.length, 1);
  const del = await rawRequest(north, { method: "DELETE", path: "/dbs/shop" });
  assert.equal(del.status, 403, show(del));
  const st = await regionState(srv);
  assert.equal(st.by[NORTH].writesRefused, 2);
  assert.equal(st.by[WEST].writesRefused, 0);
});

test("POST /_admin/failover moves the write region: GET / shows it, the old write region refuses writes, bad requests get 400", async (t) => {
  const srv = await startCosmolite(t, { memory: true, regions: SPEC });
  const eps = await endpoints(srv);
  const north = at(srv, eps[NORTH]);
  // The admin API answers in any region, a read region included.
  await failover(north, NORTH);
  const acct = await rawRequest(srv, { path: "/" });
  assert.deepEqual(acct.json.writableLocations, [{ name: NORTH, databaseAccountEndpoint: eps[NORTH] }]);
  assert.deepEqual(
    acct.json.readableLocations.map((l) => l.name),
    [NORTH, WEST],
  );
  const refused = await rawRequest(srv, { method: "POST", path: "/dbs", body: { id: "a" } });
  assert.equal(refused.status, 403, show(refused));
  assert.equal(refused.headers["x-ms-substatus"], "3");
  const made = await rawRequest(north, { method: "POST", path: "/dbs", body: { id: "a" } });
  assert.equal(made.status, 201, show(made));
  // Names compare as the SDKs compare them: without spaces, in any case.
  const back = await rawRequest(srv, { method: "POST", path: "/_admin/failover", body: { writeRegion: "westeurope" } });
  assert.equal(back.status, 200, show(back));
  assert.equal(back.json.writeRegion, WEST);

  const unknown = await rawRequest(srv, { method: "POST", path: "/_admin/failover", body: { writeRegion: "Mars" } });
  assert.equal(unknown.status, 400, show(unknown));
  assert.match(unknown.json.message, /No region 'Mars'.*'West Europe', 'North Europe'/);
  const shape = await rawRequest(srv, { method: "POST", path: "/_admin/failover", body: { region: NORTH } });
  assert.equal(shape.status, 400, show(shape));
  assert.match(shape.json.message, /writeRegion/);
  assert.equal((await regionState(srv)).write, WEST, "a refused failover changes nothing");
});

test("without --regions, /_admin/failover answers 400 and GET / is unchanged (one location)", async (t) => {
  const srv = await startCosmolite(t, { memory: true });
  const r = await rawRequest(srv, { method: "POST", path: "/_admin/failover", body: { writeRegion: NORTH } });
  assert.equal(r.status, 400, show(r));
  assert.match(r.json.message, /--regions/);
  const acct = await rawRequest(srv, { path: "/" });
  assert.equal(acct.json.writableLocations.length, 1);
  assert.deepEqual(acct.json.writableLocations, acct.json.readableLocations);
  const made = await rawRequest(srv, { method: "POST", path: "/dbs", body: { id: "a" } });
  assert.equal(made.status, 201, show(made));
});

test("the SDK with preferredLocations reads from the preferred read region and writes to the write region", async (t) => {
  const srv = await startCosmolite(t, { memory: true, regions: SPEC, partitions: 2 });
  const eps = await endpoints(srv);
  const client = srv.client({ connectionPolicy: { preferredLocations: [NORTH, WEST] } });
  const { database } = await client.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  const before = await regionState(srv);
  for (let i = 0; i < 10; i++) await container.items.create({ id: `d${i}`, pk: `p${i % 3}` });
  const mid = await regionState(srv);
  for (let i = 0; i < 10; i++) {
    const { resource, diagnostics } = await container.item(`d${i}`, `p${i % 3}`).read();
    assert.equal(resource.id, `d${i}`);
    const contacted = [...diagnostics.clientSideRequestStatistics.locationEndpointsContacted];
    assert.ok(contacted.includes(eps[NORTH]), `read ${i} went to ${NORTH}: ${contacted}`);
  }
  const { resources } = await container.items.query("SELECT * FROM c").fetchAll();
  assert.equal(resources.length, 10);
  const after = await regionState(srv);
  // The server's own count: the 10 creates landed in the write region, none was refused,
  // and the 10 point reads (plus the query) were served by the preferred read region.
  assert.ok(mid.by[WEST].requests - before.by[WEST].requests >= 10, JSON.stringify(mid));
  assert.equal(mid.by[NORTH].writesRefused, 0);
  assert.ok(after.by[NORTH].requests - mid.by[NORTH].requests >= 11, JSON.stringify(after));
});

test("failover under load: the SDK (endpoint discovery on) follows the new write region and loses no acknowledged write", async (t) => {
  const srv = await startCosmolite(t, { memory: true, regions: SPEC, partitions: 2 });
  const eps = await endpoints(srv);
  const client = srv.client({ connectionPolicy: { preferredLocations: [NORTH, WEST] } });
  const { database } = await client.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });

  const acked = [];
  let stop = false;
  let seq = 0;
  const writer = async (w) => {
    while (!stop) {
      const id = `w${w}-${seq++}`;
      const { resource } = await container.items.create({ id, pk: `p${w}` });
      assert.equal(resource.id, id);
      acked.push({ id, pk: `p${w}` });
    }
  };
  const writers = [0, 1, 2, 3].map(writer);
  // Fail over once some writes are acknowledged, then let the writers go on until
  // as many more are acknowledged in the new write region (bounded generously).
  const deadline = Date.now() + 60_000;
  while (acked.length < 20 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  await failover(srv, NORTH);
  const atFailover = acked.length;
  while (acked.length < atFailover + 40 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  stop = true;
  await Promise.all(writers);
  assert.ok(acked.length >= atFailover + 40, `writes went on after the failover: ${acked.length} acked, ${atFailover} before`);

  const st = await regionState(srv);
  assert.equal(st.write, NORTH);
  assert.ok(st.by[WEST].writesRefused >= 1, `the old write region refused a write: ${JSON.stringify(st)}`);
  // Every acknowledged write is there, read back through the SDK.
  for (const { id, pk } of acked) {
    const { resource, statusCode } = await container.item(id, pk).read();
    assert.equal(statusCode, 200, `acknowledged write ${id} is readable`);
    assert.equal(resource.id, id);
  }
  const { resources } = await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.equal(resources[0], acked.length, "no write is there twice or unacknowledged-but-counted");
  // Later writes go straight to the new write region: none more is refused.
  const refusedBefore = st.by[WEST].writesRefused;
  await container.items.create({ id: "after", pk: "p9" });
  const st2 = await regionState(srv);
  assert.equal(st2.by[WEST].writesRefused, refusedBefore);
  // And a plain write to the old region is still refused, so the SDK really had to follow.
  await assert.rejects(
    rawRequest(at(srv, eps[WEST]), { method: "POST", path: `/dbs/${database.id}/colls/c/docs`, body: { id: "x", pk: "p" } }).then(
      (r) => {
        if (r.status !== 200) throw Object.assign(new Error(r.text), { code: r.status, substatus: Number(r.headers["x-ms-substatus"]) });
      },
    ),
    httpCode(403, 3),
  );
});

test("--regions: a bad spec, or --regions with --listen, stops cosmolite at start with a message naming the problem", () => {
  const run = (...args) => spawnSync(process.env.COSMOLITE_BIN, ["--memory", ...args], { encoding: "utf8", timeout: 10_000 });
  const both = run("--regions", SPEC, "--listen", "127.0.0.1:0");
  assert.equal(both.status, 2, both.stderr);
  assert.match(both.stderr, /--regions gives every region its own address: drop --listen/);
  const dup = run("--regions", "West Europe=127.0.0.1:0,westeurope=127.0.0.1:0");
  assert.equal(dup.status, 2, dup.stderr);
  assert.match(dup.stderr, /region 'westeurope' is listed twice/);
  const port = run("--regions", "West Europe=127.0.0.1:99999");
  assert.match(port.stderr, /region 'West Europe': port must be 0..65535/);
  assert.equal(port.status, 2, port.stderr);
});

test("--region-lag 10000: a read region misses a write younger than the lag, the write region sees it at once, and after a failover the roles swap", async (t) => {
  const srv = await startCosmolite(t, { memory: true, regions: SPEC, args: ["--region-lag", "10000"] });
  const eps = await endpoints(srv);
  const west = at(srv, eps[WEST]);
  const north = at(srv, eps[NORTH]);
  const client = srv.client();
  const { database } = await client.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  const get = (where, id) =>
    rawRequest(where, {
      path: `/dbs/${database.id}/colls/c/docs/${id}`,
      headers: { "x-ms-documentdb-partitionkey": '["p"]' },
    });

  await container.items.create({ id: "d1", pk: "p", v: 1 });
  // 10 s is far longer than a create followed by a read takes, even on a loaded machine.
  const stale = await get(north, "d1");
  assert.equal(stale.status, 404, `North Europe has not applied the write yet: ${show(stale)}`);
  const fresh = await get(west, "d1");
  assert.equal(fresh.status, 200, `the write region reads its own write: ${show(fresh)}`);
  // The SDK reading in the read region: Eventual takes the lagging view, its session
  // token (Session, the default) is met by a replica that has the write.
  const reader = srv.client({ connectionPolicy: { preferredLocations: [NORTH] } });
  const rc = reader.database(database.id).container("c");
  const ev = await rc.item("d1", "p").read({ consistencyLevel: "Eventual" });
  assert.equal(ev.statusCode, 404, "an Eventual read in the lagging region misses the young write");

  // The read region catches up (bounded generously; no timing asserted).
  const deadline = Date.now() + 90_000;
  let caught;
  while (Date.now() < deadline && (caught = await get(north, "d1")).status !== 200) await new Promise((r) => setTimeout(r, 250));
  assert.equal(caught.status, 200, `North Europe applied the write in the end: ${show(caught)}`);
  assert.equal(caught.json.v, 1);

  await failover(srv, NORTH);
  await container.items.create({ id: "d2", pk: "p", v: 2 });
  assert.equal((await get(north, "d2")).status, 200, "the new write region reads its own write at once");
  const westStale = await get(west, "d2");
  assert.equal(westStale.status, 404, `West Europe, now a read region, lags: ${show(westStale)}`);
});

test("--region-lag without --regions, or with --replica-lag, is a usage error", () => {
  const run = (...args) => spawnSync(process.env.COSMOLITE_BIN, ["--memory", ...args], { encoding: "utf8", timeout: 10_000 });
  const alone = run("--region-lag", "100");
  assert.equal(alone.status, 2, alone.stderr);
  assert.match(alone.stderr, /--region-lag needs --regions/);
  const both = run("--regions", SPEC, "--region-lag", "100", "--replica-lag", "100");
  assert.equal(both.status, 2, both.stderr);
  assert.match(both.stderr, /exclude each other/);
});
