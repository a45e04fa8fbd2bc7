// Provisioned throughput and request charges (issue 15, behaviour 2), refereed
// by the official SDK: every response carries x-ms-request-charge from the
// documented cost model (docs/azure-twin.md); a container created with
// `throughput: 400` has 400 RU/s split evenly over its partition key ranges;
// a range that spent its share answers 429/3200 with x-ms-retry-after-ms and
// the SDK's own retries complete the work; offers are listed, read
// (container.readOffer) and replaced at run time. Nothing is metered unless
// some container or database has throughput (the default).
import assert from "node:assert/strict";
import { test } from "node:test";

import { pkHeaders, rawRequest, sdkEpk, show, startCosmolite, uid } from "./harness.mjs";

/** A client whose throttle retries are generous, so a test is about outcomes, not about the SDK's default cap. */
function patientClient(srv) {
  return srv.client({
    connectionPolicy: { retryOptions: { maxRetryAttemptCount: 1000, maxWaitTimeInSeconds: 120 } },
  });
}

/** A document of about 1 KiB with a handful of indexed properties. */
function kibDoc(id, pk) {
  return { id, pk, a: 1, b: "two", c: true, d: [1, 2], pad: "x".repeat(900) };
}

/**
 * A 16 KiB document (about 10 RU to write): a burst of them outruns 400 RU/s
 * however slow the server is (sanitizers, a loaded machine), so tests need not
 * depend on its speed.
 */
function heavyDoc(id, pk) {
  return { id, pk, a: 1, pad: "h".repeat(16 * 1024) };
}

/** The "N requests were answered 429/3200" figure of a stopped server (0 when not logged). */
function throttledCount(srv) {
  const m = /throughput: (\d+) requests were answered 429\/3200/.exec(srv.stderr());
  return m ? Number(m[1]) : 0;
}

test("request charges follow the cost model: Azure's published figures by size, replace ~2x, queries and feeds", async (t) => {
  const srv = await startCosmolite(t);
  const client = srv.client();
  const { database } = await client.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });

  const created = await container.items.create(kibDoc("a", "p"));
  assert.ok(created.requestCharge >= 5 && created.requestCharge <= 7, `create of 1 KiB: ${created.requestCharge} RU`);
  const read = await container.item("a", "p").read();
  assert.ok(read.requestCharge >= 1 && read.requestCharge <= 1.5, `point read of 1 KiB: ${read.requestCharge} RU`);
  const replaced = await container.item("a", "p").replace({ ...kibDoc("a", "p"), v: 2 });
  assert.ok(
    replaced.requestCharge >= 1.8 * created.requestCharge && replaced.requestCharge <= 2.5 * created.requestCharge,
    `replace ${replaced.requestCharge} RU is about twice create ${created.requestCharge} RU`,
  );
  // Azure's published figures: 8 KiB reads 1.33 RU and writes 7.04 RU, 16 KiB 1.67 and 9.52.
  const big = await container.items.create({ id: "big", pk: "p", pad: "y".repeat(12 * 1024) });
  assert.ok(big.requestCharge > 7 && big.requestCharge < 9.6, `a 12 KiB create: ${big.requestCharge} RU`);
  const bigRead = await container.item("big", "p").read();
  assert.ok(bigRead.requestCharge > 1.33 && bigRead.requestCharge < 1.67, `a 12 KiB read: ${bigRead.requestCharge} RU`);

  const q = await container.items.query("SELECT * FROM c").fetchAll();
  assert.ok(q.requestCharge >= 2.3, `a query costs at least 2.3 RU: ${q.requestCharge}`);
  const r = await rawRequest(srv, {
    path: `/dbs/${database.id}/colls/c/docs`,
    headers: { "a-im": "Incremental Feed", "x-ms-documentdb-partitionkeyrangeid": "0" },
  });
  assert.equal(r.status, 200, show(r));
  assert.ok(Number(r.headers["x-ms-request-charge"]) > 1, `a change-feed page costs more than an empty one: ${show(r)}`);
  const del = await container.item("a", "p").delete();
  assert.ok(del.requestCharge >= 5, `delete: ${del.requestCharge} RU`);
  // Failures carry a charge too, as on Azure: a lookup that found nothing or a conflict costs
  // what looking cost; a request refused before any work costs 0.
  const docs = `/dbs/${database.id}/colls/c/docs`;
  const missing = await rawRequest(srv, { path: `${docs}/nope`, headers: pkHeaders("p") });
  assert.equal(missing.status, 404, show(missing));
  assert.equal(Number(missing.headers["x-ms-request-charge"]), 1, `a 404 read: ${show(missing)}`);
  const body = kibDoc("big", "p");
  const conflict = await rawRequest(srv, { method: "POST", path: docs, headers: pkHeaders("p"), body });
  assert.equal(conflict.status, 409, show(conflict));
  assert.ok(Number(conflict.headers["x-ms-request-charge"]) >= 1, `a 409 create: ${show(conflict)}`);
  const unsigned = await rawRequest(srv, { path: docs, sign: false });
  assert.equal(unsigned.status, 401, show(unsigned));
  assert.equal(unsigned.headers["x-ms-request-charge"], "0.00", `a 401: ${show(unsigned)}`);
  // No throughput anywhere: nothing is ever throttled.
  await srv.stop();
  assert.equal(throttledCount(srv), 0);
});

test("throughput: 400 gives an offer in Azure's shape; readOffer, GET /offers and GET /offers/{id} agree", async (t) => {
  const srv = await startCosmolite(t);
  const client = srv.client();
  const { database } = await client.databases.create({ id: uid("db") });
  const { container, resource: coll } = await database.containers.create({
    id: "c",
    partitionKey: "/pk",
    throughput: 400,
  });
  const { resource: offer } = await container.readOffer();
  assert.ok(offer, "the container has an offer");
  assert.equal(offer.content.offerThroughput, 400);
  assert.equal(offer.offerVersion, "V2");
  assert.equal(offer.offerType, "Invalid");
  assert.equal(offer.resource, coll._self);
  assert.equal(offer.offerResourceId, coll._rid);
  assert.equal(offer._self, `offers/${offer.id}/`);
  assert.equal(offer._rid, offer.id);
  assert.match(offer._etag, /^".+"$/);

  const list = await rawRequest(srv, { path: "/offers" });
  assert.equal(list.status, 200, show(list));
  assert.equal(list.json._count, 1);
  assert.deepEqual(list.json.Offers[0], offer);
  const one = await rawRequest(srv, { path: `/offers/${offer.id}` });
  assert.equal(one.status, 200, show(one));
  assert.deepEqual(one.json, offer);
  assert.equal(one.headers.etag, offer._etag);
  const { resources: all } = await client.offers.readAll().fetchAll();
  assert.equal(all.length, 1);

  // A container created without throughput has none: unlimited, as before.
  const { container: free } = await database.containers.create({ id: "free", partitionKey: "/pk" });
  const { resource: none } = await free.readOffer();
  assert.equal(none, undefined);
  // A database with shared throughput has its own offer.
  const { database: shared } = await client.databases.create({ id: uid("sdb"), throughput: 1000 });
  const { resource: dbOffer } = await shared.readOffer();
  assert.equal(dbOffer.content.offerThroughput, 1000);
  assert.equal(dbOffer.resource, (await shared.read()).resource._self);
});

test("400 RU/s on one range: a burst is throttled with 429/3200 and the SDK's own retries complete every write", async (t) => {
  const srv = await startCosmolite(t, { partitions: 1 });
  const client = patientClient(srv);
  const { database } = await client.databases.create({ id: uid("db") });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk", throughput: 400 });
  // Bursts of 100 concurrent 16 KiB writes (~10 RU each: 2.5 s of budget per burst) until the
  // SDK reports having retried a 429; bounded, and independent of the server's speed.
  let retried = 0;
  let n = 0;
  for (let round = 0; round < 10 && retried === 0; round++) {
    const results = await Promise.all(
      Array.from({ length: 100 }, (_, i) => container.items.create(heavyDoc(`d${n + i}`, `p${i % 7}`))),
    );
    n += results.length;
    for (const r of results) {
      assert.equal(r.statusCode, 201);
      retried += Number(r.headers["x-ms-throttle-retry-count"] ?? 0);
    }
  }
  assert.ok(retried > 0, `the SDK saw 429s and retried them (${retried} retries)`);
  const { resources } = await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.equal(resources[0], n, "every acknowledged write is there, once");
  await srv.stop();
  assert.ok(throttledCount(srv) >= retried, `the server counted its 429s: ${throttledCount(srv)} >= ${retried}`);
});

/**
 * Writes heavy documents to pk on the raw wire, 16 at a time, until a 429
 * comes back (bounded); returns that response. Every other answer is a 201.
 */
async function writeUntilThrottled(srv, db, coll, pk, maxRounds = 200) {
  for (let round = 0; round < maxRounds; round++) {
    const all = await Promise.all(
      Array.from({ length: 16 }, () =>
        rawRequest(srv, {
          method: "POST",
          path: `/dbs/${db}/colls/${coll}/docs`,
          headers: pkHeaders(pk),
          body: heavyDoc(uid("w"), pk),
        }),
      ),
    );
    for (const r of all) if (r.status !== 429) assert.equal(r.status, 201, show(r));
    const throttled = all.find((r) => r.status === 429);
    if (throttled) return throttled;
  }
  throw new Error(`no 429 within ${maxRounds} rounds of writes to ${pk}`);
}

/** Retries one raw request as the SDKs do: after each 429, wait x-ms-retry-after-ms (bounded). */
async function untilNotThrottled(send, maxTries = 50) {
  for (let i = 0; i < maxTries; i++) {
    const r = await send();
    if (r.status !== 429) return r;
    await new Promise((res) => setTimeout(res, Number(r.headers["x-ms-retry-after-ms"]) + 10));
  }
  throw new Error(`still throttled after ${maxTries} tries`);
}

test("the budget is split over the ranges: a spent range answers 429/3200 while another range still writes", async (t) => {
  const srv = await startCosmolite(t, { partitions: 4 });
  const client = srv.client();
  const db = uid("db");
  const { database } = await client.databases.create({ id: db });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk", throughput: 400 });
  const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();
  assert.equal(ranges.length, 4);
  const rangeOf = async (pk) => {
    const epk = await sdkEpk(pk);
    return ranges.find((r) => r.minInclusive <= epk && epk < r.maxExclusive).id;
  };
  const hot = "hot";
  let cold;
  for (let i = 0; !cold; i++) if ((await rangeOf(`k${i}`)) !== (await rangeOf(hot))) cold = `k${i}`;

  const r = await writeUntilThrottled(srv, db, "c", hot);
  assert.equal(r.headers["x-ms-substatus"], "3200", show(r));
  assert.equal(r.json.code, "TooManyRequests");
  assert.match(r.json.message, /Request rate is large/);
  const wait = Number(r.headers["x-ms-retry-after-ms"]);
  assert.ok(wait >= 1 && wait <= 5000 + 100, `x-ms-retry-after-ms is when budget returns: ${wait}`);
  assert.ok(r.headers["x-ms-request-charge"] !== undefined, "a 429 carries a request charge too");

  // Nothing was applied by the refused write, and the other range has its own budget.
  const other = await rawRequest(srv, {
    method: "POST",
    path: `/dbs/${db}/colls/c/docs`,
    headers: pkHeaders(cold),
    body: kibDoc("cold-1", cold),
  });
  assert.equal(other.status, 201, `a key on another range is not throttled: ${show(other)}`);
  // Honouring x-ms-retry-after-ms, the spent range takes writes again.
  const again = await untilNotThrottled(() =>
    rawRequest(srv, {
      method: "POST",
      path: `/dbs/${db}/colls/c/docs`,
      headers: pkHeaders(hot),
      body: kibDoc("hot-after", hot),
    }),
  );
  assert.equal(again.status, 201, `after x-ms-retry-after-ms the range has budget again: ${show(again)}`);
});

test("a throughput change at run time: offer.replace raises the budget and the next writes are not throttled", async (t) => {
  const srv = await startCosmolite(t, { partitions: 1 });
  const client = patientClient(srv);
  const db = uid("db");
  const { database } = await client.databases.create({ id: db });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk", throughput: 400 });
  await writeUntilThrottled(srv, db, "c", "p");

  const { resource: offer, offer: handle } = await container.readOffer();
  const { resource: raised } = await handle.replace({ ...offer, content: { ...offer.content, offerThroughput: 100000 } });
  assert.equal(raised.content.offerThroughput, 100000);
  assert.equal(raised.id, offer.id, "the offer keeps its id");
  assert.notEqual(raised._etag, offer._etag, "a replaced offer has a new etag");
  assert.equal((await container.readOffer()).resource.content.offerThroughput, 100000);

  await new Promise((res) => setTimeout(res, 1100)); // past the old debt: at most 5 s of 400 RU/s, refilled at 100000 RU/s
  let retried = 0;
  for (let i = 0; i < 100; i++) {
    const r = await container.items.create(kibDoc(`after${i}`, "p"));
    retried += Number(r.headers["x-ms-throttle-retry-count"] ?? 0);
  }
  assert.equal(retried, 0, "100 sequential writes fit 100000 RU/s without a single 429");

  // Back down: the budget is enforced again at once.
  await handle.replace({ ...raised, content: { ...raised.content, offerThroughput: 400 } });
  const r = await writeUntilThrottled(srv, db, "c", "p");
  assert.equal(r.status, 429);
});

test("offers survive a restart and stay enforced", async (t) => {
  const srv = await startCosmolite(t, { partitions: 1 });
  const db = uid("db");
  const { database } = await srv.client().databases.create({ id: db });
  await database.containers.create({ id: "c", partitionKey: "/pk", throughput: 500 });
  await srv.restart();
  const container = srv.client().database(db).container("c");
  const { resource: offer } = await container.readOffer();
  assert.equal(offer.content.offerThroughput, 500);
  const r = await writeUntilThrottled(srv, db, "c", "p");
  assert.equal(r.headers["x-ms-substatus"], "3200");
});

test("--default-throughput gives containers created without throughput an offer; shared databases keep theirs", async (t) => {
  const srv = await startCosmolite(t, { partitions: 1, args: ["--default-throughput", "400"] });
  const client = srv.client();
  const db = uid("db");
  const { database } = await client.databases.create({ id: db });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk" });
  assert.equal((await container.readOffer()).resource.content.offerThroughput, 400);
  const { container: own } = await database.containers.create({ id: "own", partitionKey: "/pk", throughput: 800 });
  assert.equal((await own.readOffer()).resource.content.offerThroughput, 800);
  await writeUntilThrottled(srv, db, "c", "p");

  // A container in a database with shared throughput gets no offer of its own.
  const { database: shared } = await client.databases.create({ id: uid("sdb"), throughput: 400 });
  const { container: inShared } = await shared.containers.create({ id: "s", partitionKey: "/pk" });
  assert.equal((await inShared.readOffer()).resource, undefined);
  const r = await writeUntilThrottled(srv, shared.id, "s", "p");
  assert.equal(r.headers["x-ms-substatus"], "3200", "the database's budget is enforced on its containers");
});

test("bad throughput is refused with a message naming the field, and nothing is created", async (t) => {
  const srv = await startCosmolite(t);
  const db = uid("db");
  for (const bad of ["abc", "399", "450", "1000100"]) {
    const r = await rawRequest(srv, {
      method: "POST",
      path: "/dbs",
      headers: { "x-ms-offer-throughput": bad },
      body: { id: db },
    });
    assert.equal(r.status, 400, show(r));
    assert.match(r.json.message, /x-ms-offer-throughput/);
  }
  assert.equal((await rawRequest(srv, { path: `/dbs/${db}` })).status, 404, "no database was created");
  const { database } = await srv.client().databases.create({ id: db });
  const { container } = await database.containers.create({ id: "c", partitionKey: "/pk", throughput: 400 });
  const { resource: offer } = await container.readOffer();
  const low = await rawRequest(srv, {
    method: "PUT",
    path: `/offers/${offer.id}`,
    body: { ...offer, content: { offerThroughput: 50 } },
  });
  assert.equal(low.status, 400, show(low));
  assert.match(low.json.message, /content\.offerThroughput/);
  const missing = await rawRequest(srv, { method: "PUT", path: "/offers/nope", body: { ...offer, id: "nope" } });
  assert.equal(missing.status, 404, show(missing));
  const stale = await rawRequest(srv, {
    method: "PUT",
    path: `/offers/${offer.id}`,
    headers: { "if-match": '"stale"' },
    body: offer,
  });
  assert.equal(stale.status, 412, show(stale));
  assert.equal((await container.readOffer()).resource.content.offerThroughput, 400, "the offer is unchanged");
  await assert.rejects(
    startCosmolite(null, { args: ["--default-throughput", "450"] }),
    /--default-throughput/,
  );
});
