// Raw HTTP against cosmolite: authentication (PROTOCOL.md section 1), error
// shapes, limits, id and partition-key validation, change-feed headers.
// Requests are built by hand with node's http and crypto, so nothing an SDK
// would smooth over is hidden.
import assert from "node:assert/strict";
import crypto from "node:crypto";
import { after, before, test } from "node:test";

import { authHeader, createRawContainer, rawRequest, resourceFor, rfc1123, show, signature, startCosmolite } from "./harness.mjs";

let srv;
let small; // a second server with a tiny --max-request-bytes
const DB = "rawdb";
const COLL = "c";
const DOCS = `/dbs/${DB}/colls/${COLL}/docs`;
const SMALL_LIMIT = 4096;

before(async () => {
  srv = await startCosmolite(null);
  small = await startCosmolite(null, { maxRequestBytes: SMALL_LIMIT, memory: true });
  for (const s of [srv, small]) await createRawContainer(s, DB, COLL);
});
after(async () => {
  try {
    await small?.stop();
  } finally {
    await srv?.stop();
  }
});

/** The partition key header for a value; undefined (property missing) is [{}]. */
const pkHeader = (v) => ({ "x-ms-documentdb-partitionkey": v === undefined ? "[{}]" : JSON.stringify([v]) });

function assertError(r, statuses, what) {
  const list = Array.isArray(statuses) ? statuses : [statuses];
  assert.ok(list.includes(r.status), `${what}: expected ${list.join(" or ")}, got ${show(r)}`);
  assert.ok(r.json && typeof r.json === "object", `${what}: error body must be JSON, got ${JSON.stringify(r.text.slice(0, 200))}`);
  assert.equal(typeof r.json.code, "string", `${what}: error body has a string code: ${r.text.slice(0, 200)}`);
  assert.equal(typeof r.json.message, "string", `${what}: error body has a string message`);
  assert.ok(r.json.message.length > 0, `${what}: error message is not empty`);
}

async function createDoc(s, doc) {
  const r = await rawRequest(s, { method: "POST", path: DOCS, headers: pkHeader(doc.pk), body: doc });
  assert.equal(r.status, 201, show(r));
  return r;
}

// ---- signing ------------------------------------------------------------------

test("the test's signer reproduces the PROTOCOL.md vectors", () => {
  const key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw==";
  const date = "Tue, 01 Apr 2025 12:00:00 GMT";
  const v = (verb, type, link) => signature({ verb, resourceType: type, resourceLink: link, date, key });
  assert.equal(v("GET", "docs", "dbs/sagas/colls/orders/docs/order-1"), "ySw5ZulFaeUQf5JmTTUyZEJGOOWH55qOY5f0H4J1CP4=");
  assert.equal(v("POST", "docs", "dbs/sagas/colls/orders"), "8Ry8jUgsvoN2+JCL7nuBWVdDf1n8DMgLKdVHNpuyc9c=");
  assert.equal(v("GET", "pkranges", "dbs/sagas/colls/orders"), "ebBhhv1Mn0k3VUhK4SOgYAZxsH7DFlx6wQgp9jzhqiU=");
  assert.equal(v("POST", "dbs", ""), "16XSXUWhkWEhnL4fPTcrlvZ0cT7w2+Q/i2EJHl/JiVk=");
  assert.equal(v("GET", "", ""), "3ZIEJvGF+vVbXmz9J0QIVD+G0L4pS+6wp5kHrsKi12o=");
  assert.equal(
    authHeader("8Ry8jUgsvoN2+JCL7nuBWVdDf1n8DMgLKdVHNpuyc9c="),
    "type%3Dmaster%26ver%3D1.0%26sig%3D8Ry8jUgsvoN2%2BJCL7nuBWVdDf1n8DMgLKdVHNpuyc9c%3D",
  );
  assert.deepEqual(resourceFor("/dbs/sagas/colls/orders/pkranges"), { resourceType: "pkranges", resourceLink: "dbs/sagas/colls/orders" });
});

test("GET / (database account) advertises the server's own endpoint", async () => {
  const r = await rawRequest(srv, { path: "/" });
  assert.equal(r.status, 200, show(r));
  const w = r.json.writableLocations;
  assert.ok(Array.isArray(w) && w.length >= 1, "writableLocations is a non-empty array");
  const url = new URL(w[0].databaseAccountEndpoint);
  assert.equal(url.protocol, "http:", "plain-HTTP server advertises http");
  assert.equal(url.port, String(srv.port), "advertised port is the bound port");
  assert.ok(["127.0.0.1", "localhost"].includes(url.hostname), `advertised host ${url.hostname}`);
  assert.ok(Array.isArray(r.json.readableLocations) && r.json.readableLocations.length >= 1);
  assert.equal(typeof r.json.queryEngineConfiguration, "string", "queryEngineConfiguration is a JSON string");
  JSON.parse(r.json.queryEngineConfiguration);
  assert.equal(r.json.userConsistencyPolicy?.defaultConsistencyLevel, "Session");
});

test("missing authorization header: 401 with a JSON {code,message}", async () => {
  for (const path of ["/", "/dbs", DOCS]) {
    const r = await rawRequest(srv, { path, sign: false, headers: { "x-ms-date": rfc1123() } });
    assertError(r, 401, `GET ${path} unsigned`);
    assert.equal(r.json.code, "Unauthorized");
  }
});

test("tampered signature: 401", async () => {
  const flip = (sig) => (sig[0] === "A" ? "B" : "A") + sig.slice(1);
  const r = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { tamper: flip } });
  assertError(r, 401, "tampered signature");
  const trunc = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { tamper: (s) => s.slice(0, 20) } });
  assertError(trunc, 401, "truncated signature");
  const empty = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { tamper: () => "" } });
  assertError(empty, 401, "empty signature");
  const garbage = await rawRequest(srv, { path: `/dbs/${DB}`, headers: { authorization: "garbage", "x-ms-date": rfc1123() }, sign: false });
  assertError(garbage, 401, "garbage authorization header");
  const aad = await rawRequest(srv, {
    path: `/dbs/${DB}`,
    headers: { authorization: encodeURIComponent("type=aad&ver=1.0&sig=eyJhbGciOi.x.y"), "x-ms-date": rfc1123() },
    sign: false,
  });
  assertError(aad, 401, "AAD token (not supported)");
});

test("signature computed over the wrong resource: 401", async () => {
  const r1 = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { resourceLink: "dbs/otherdb" } });
  assertError(r1, 401, "wrong link");
  const r2 = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { resourceType: "colls" } });
  assertError(r2, 401, "wrong type");
  const r3 = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { verb: "POST" } });
  assertError(r3, 401, "wrong verb");
  const r4 = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { resourceLink: `dbs/${DB.toUpperCase()}` } });
  assertError(r4, 401, "name-based links keep their case");
});

test("signature made with another key: 401", async () => {
  const other = crypto.randomBytes(64).toString("base64");
  const r = await rawRequest(srv, { path: "/dbs", sign: { key: other } });
  assertError(r, 401, "wrong key");
});

test("auth header encodings: upper-hex, lower-hex and unencoded are all accepted", async () => {
  for (const encoding of ["upper", "lower", "none"]) {
    const r = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { encoding } });
    assert.equal(r.status, 200, `${encoding}: ${show(r)}`);
  }
  // '+' in a signature must not become a space: find a date whose signature has '+'.
  let tried = 0;
  for (let s = 0; s < 200; s++) {
    const date = rfc1123(new Date(Date.now() - s * 1000));
    const sig = signature({ verb: "GET", resourceType: "dbs", resourceLink: `dbs/${DB}`, date, key: srv.key });
    if (!sig.includes("+")) continue;
    tried++;
    for (const encoding of ["upper", "none"]) {
      const r = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { date, encoding } });
      assert.equal(r.status, 200, `signature with '+' (${encoding}): ${show(r)}`);
    }
    break;
  }
  assert.equal(tried, 1, "found a signature containing '+'");
});

test("x-ms-date 20 minutes old or 20 minutes ahead: rejected, message names the date", async () => {
  for (const offset of [-20, 20]) {
    const date = rfc1123(new Date(Date.now() + offset * 60_000));
    const r = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { date } });
    assertError(r, [401, 403], `x-ms-date ${offset} min`);
    assert.match(r.json.message, /date|time|expired/i, `message mentions the date: ${r.json.message}`);
  }
  // Within the window (2 minutes skew) is fine.
  const ok = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { date: rfc1123(new Date(Date.now() - 120_000)) } });
  assert.equal(ok.status, 200, show(ok));
});

test("malformed x-ms-date: 401", async () => {
  const now = new Date();
  const bad = [
    "yesterday",
    now.toISOString(),
    now.toUTCString().replace("GMT", "PST"),
    now.toUTCString().replace("GMT", "+0000"),
    "",
  ];
  for (const date of bad) {
    const r = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { date } });
    assertError(r, 401, `x-ms-date ${JSON.stringify(date)}`);
  }
});

test("no date at all: 401", async () => {
  const r = await rawRequest(srv, { path: `/dbs/${DB}`, sign: { noXmsDate: true } });
  assertError(r, 401, "no x-ms-date and no date");
});

test("only a `date` header: line 4 empty, line 5 the lowercase date", async () => {
  const date = rfc1123();
  const r = await rawRequest(srv, {
    path: `/dbs/${DB}`,
    headers: { date },
    sign: { date, noXmsDate: true, dateLine: "", line5: date.toLowerCase() },
  });
  assert.equal(r.status, 200, `date-only request: ${show(r)}`);
  const wrong = await rawRequest(srv, {
    path: `/dbs/${DB}`,
    headers: { date },
    sign: { date, noXmsDate: true, dateLine: "", line5: "" },
  });
  assertError(wrong, 401, "date-only request signed without the date");
});

// ---- request validation ---------------------------------------------------------

test("malformed JSON bodies: 400 with a message", async () => {
  const cases = [
    ["POST", "/dbs", '{"id": "x",'],
    ["POST", `/dbs/${DB}/colls`, "{not json}"],
    ["POST", DOCS, '{"id":"m1","pk":"p"'],
    ["POST", DOCS, "[1,2,3]"],
    ["POST", DOCS, '"just a string"'],
    ["POST", DOCS, ""],
    ["PUT", `${DOCS}/m1`, "{{"],
  ];
  for (const [method, path, body] of cases) {
    const r = await rawRequest(srv, { method, path, body, headers: pkHeader("p") });
    assertError(r, 400, `${method} ${path} ${JSON.stringify(body)}`);
  }
  const noId = await rawRequest(srv, { method: "POST", path: DOCS, body: { pk: "p" }, headers: pkHeader("p") });
  assertError(noId, 400, "document without id");
  const numId = await rawRequest(srv, { method: "POST", path: DOCS, body: { id: 5, pk: "p" }, headers: pkHeader("p") });
  assertError(numId, 400, "numeric id");
  const badUtf8 = await rawRequest(srv, {
    method: "POST",
    path: DOCS,
    body: Buffer.concat([Buffer.from('{"id":"u","pk":"p","x":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
    headers: pkHeader("p"),
  });
  assertError(badUtf8, 400, "invalid UTF-8 in body");
});

test("unknown routes: 404 or 400 with a JSON error", async () => {
  const cases = [
    ["GET", "/nothing-here"],
    ["GET", `/dbs/${DB}/widgets`],
    ["GET", `/dbs/${DB}/colls/${COLL}/docs/a/b/c`],
    ["GET", `/dbs/${DB}/colls/${COLL}/gizmos/x`],
    ["POST", "/dbs/x/y/z/w/v/u/t"],
  ];
  for (const [method, path] of cases) {
    const r = await rawRequest(srv, { method, path, body: method === "POST" ? {} : undefined });
    assertError(r, [400, 404], `${method} ${path}`);
  }
  const verb = await rawRequest(srv, { method: "DELETE", path: "/dbs" });
  assertError(verb, [400, 404, 405], "DELETE on the database feed");
});

test(`body over --max-request-bytes (${SMALL_LIMIT}): 413`, async () => {
  const big = { id: "big", pk: "p", blob: "x".repeat(SMALL_LIMIT + 100) };
  const r = await rawRequest(small, { method: "POST", path: DOCS, body: big, headers: pkHeader("p") });
  assertError(r, 413, "oversized request body");
  const okDoc = { id: "fits", pk: "p", blob: "y".repeat(1000) };
  const ok = await rawRequest(small, { method: "POST", path: DOCS, body: okDoc, headers: pkHeader("p") });
  assert.equal(ok.status, 201, `a body under the limit still works: ${show(ok)}`);
});

test("document over 2 MB: 413", async () => {
  const doc = { id: "huge", pk: "p", blob: "z".repeat(2 * 1024 * 1024 + 1) };
  const r = await rawRequest(srv, { method: "POST", path: DOCS, body: doc, headers: pkHeader("p") });
  assertError(r, 413, "document over 2 MB");
  const read = await rawRequest(srv, { path: `${DOCS}/huge`, headers: pkHeader("p") });
  assert.equal(read.status, 404, "the oversized document was not stored");
});

test("ids with / \\ ? # or a trailing space in a body are rejected with 400", async () => {
  for (const id of ["a/b", "a\\b", "a?b", "a#b", "ends-with-space "]) {
    for (const upsert of [false, true]) {
      const r = await rawRequest(srv, {
        method: "POST",
        path: DOCS,
        body: { id, pk: "p" },
        headers: { ...pkHeader("p"), ...(upsert ? { "x-ms-documentdb-is-upsert": "True" } : {}) },
      });
      assertError(r, 400, `${upsert ? "upsert" : "create"} id ${JSON.stringify(id)}`);
    }
  }
});

test("URL ids decoding to / \\ ? # are rejected with 400 on GET, PUT and DELETE", async () => {
  // Every case is tried before asserting, so one run lists all the wrong answers.
  const wrong = [];
  for (const enc of ["a%2Fb", "a%2fb", "a%5Cb", "a%3Fb", "a%23b"]) {
    const path = `${DOCS}/${enc}`;
    const id = decodeURIComponent(enc);
    for (const method of ["GET", "PUT", "DELETE"]) {
      const body = method === "PUT" ? { id, pk: "p" } : undefined;
      const r = await rawRequest(srv, { method, path, body, headers: pkHeader("p") });
      try {
        assertError(r, 400, `${method} ${path}`);
      } catch (e) {
        wrong.push(e.message);
      }
    }
  }
  assert.deepEqual(wrong, [], wrong.join("\n"));
});

test("replace whose body id differs from the URL id: 400", async () => {
  await createDoc(srv, { id: "r1", pk: "p" });
  const r = await rawRequest(srv, { method: "PUT", path: `${DOCS}/r1`, body: { id: "r2", pk: "p" }, headers: pkHeader("p") });
  assertError(r, 400, "PUT body id != URL id");
});

test("partition key header that is not a JSON array: 400", async () => {
  await createDoc(srv, { id: "k1", pk: "p" });
  for (const h of ["p", "[p]", '"p"', "[", '["p"', "{}", "[]", '["p","q"]', "[[1]]"]) {
    const read = await rawRequest(srv, { path: `${DOCS}/k1`, headers: { "x-ms-documentdb-partitionkey": h } });
    assertError(read, 400, `read with partition key header ${h}`);
    const create = await rawRequest(srv, {
      method: "POST",
      path: DOCS,
      body: { id: "k2", pk: "p" },
      headers: { "x-ms-documentdb-partitionkey": h },
    });
    assertError(create, 400, `create with partition key header ${h}`);
  }
  const missing = await rawRequest(srv, { path: `${DOCS}/k1` });
  assertError(missing, 400, "point read without a partition key header");
});

test("partition key header disagreeing with the body: 400 with substatus 1001", async () => {
  const cases = [
    [["other"], { id: "d1", pk: "p" }],
    [[1], { id: "d2", pk: "1" }],
    [[true], { id: "d3", pk: "true" }],
    [[null], { id: "d4" }],
    [[{}], { id: "d5", pk: null }],
    [["p"], { id: "d6" }],
  ];
  for (const [hdr, body] of cases) {
    const header = { "x-ms-documentdb-partitionkey": JSON.stringify(hdr) };
    const what = `header ${JSON.stringify(hdr)} body ${JSON.stringify(body)}`;
    const post = await rawRequest(srv, { method: "POST", path: DOCS, body, headers: header });
    assertError(post, 400, `POST ${what}`);
    assert.equal(post.headers["x-ms-substatus"], "1001", `POST ${what}: substatus 1001: ${show(post)}`);
    // The document exists in the header's partition, so a PUT reaches the check.
    const inHeaderPk = { id: body.id };
    if (!(typeof hdr[0] === "object" && hdr[0] !== null)) inHeaderPk.pk = hdr[0];
    const made = await rawRequest(srv, { method: "POST", path: DOCS, body: inHeaderPk, headers: header });
    assert.equal(made.status, 201, `setup ${JSON.stringify(inHeaderPk)}: ${show(made)}`);
    const put = await rawRequest(srv, { method: "PUT", path: `${DOCS}/${body.id}`, body, headers: header });
    assertError(put, 400, `PUT ${what}`);
    assert.equal(put.headers["x-ms-substatus"], "1001", `PUT ${what}: substatus 1001: ${show(put)}`);
  }
  // Non-ASCII escaped as \uXXXX in the header (as the JS SDK sends) matches the raw body value.
  const r = await rawRequest(srv, {
    method: "POST",
    path: DOCS,
    body: { id: "esc", pk: "ü-中" },
    headers: { "x-ms-documentdb-partitionkey": '["\\u00fc-\\u4e2d"]' },
  });
  assert.equal(r.status, 201, `escaped header matches: ${show(r)}`);
});

// ---- responses ---------------------------------------------------------------------

test("write responses: etag, request charge, session token; delete is 204 with no body", async () => {
  const c = await createDoc(srv, { id: "w1", pk: "p" });
  assert.equal(c.headers.etag, c.json._etag, "etag header equals _etag");
  assert.ok(Number.isFinite(Number(c.headers["x-ms-request-charge"])), "x-ms-request-charge is a number");
  assert.match(c.headers["content-type"] ?? "", /application\/json/);
  const up = await rawRequest(srv, {
    method: "POST",
    path: DOCS,
    body: { id: "w1", pk: "p", v: 2 },
    headers: { ...pkHeader("p"), "x-ms-documentdb-is-upsert": "True" },
  });
  assert.equal(up.status, 200, `upsert of an existing doc: ${show(up)}`);
  const stale = await rawRequest(srv, {
    method: "PUT",
    path: `${DOCS}/w1`,
    body: { id: "w1", pk: "p", v: 3 },
    headers: { ...pkHeader("p"), "if-match": c.headers.etag },
  });
  assertError(stale, 412, "replace with stale If-Match");
  assert.equal(stale.json.code, "PreconditionFailed");
  const dup = await rawRequest(srv, { method: "POST", path: DOCS, body: { id: "w1", pk: "p" }, headers: pkHeader("p") });
  assertError(dup, 409, "duplicate create");
  assert.equal(dup.json.code, "Conflict");
  const ghost = await rawRequest(srv, { method: "PUT", path: `${DOCS}/ghost`, body: { id: "ghost", pk: "p" }, headers: { ...pkHeader("p"), "if-match": '"x"' } });
  assertError(ghost, [404, 412], "If-Match on a missing document");
  const d = await rawRequest(srv, { method: "DELETE", path: `${DOCS}/w1`, headers: pkHeader("p") });
  assert.equal(d.status, 204, show(d));
  assert.equal(d.text, "", "204 has no body");
  const nf = await rawRequest(srv, { path: `${DOCS}/w1`, headers: pkHeader("p") });
  assertError(nf, 404, "read after delete");
  assert.equal(nf.json.code, "NotFound");
  const nocoll = await rawRequest(srv, { path: `/dbs/${DB}/colls/nope/docs/x`, headers: pkHeader("p") });
  assertError(nocoll, 404, "document in a missing container");
  assert.equal(nocoll.headers["x-ms-substatus"], "1003", `missing owner resource is 404/1003: ${show(nocoll)}`);
});

test("change feed: 304 carries an etag and a session token 0:-1#<lsn>; 200 pages carry the cursor", async () => {
  const base = `/dbs/${DB}/colls/cf/docs`;
  const mk = await rawRequest(srv, { method: "POST", path: `/dbs/${DB}/colls`, body: { id: "cf", partitionKey: { paths: ["/pk"], kind: "Hash", version: 2 } } });
  assert.equal(mk.status, 201, show(mk));
  const cf = (extra) =>
    rawRequest(srv, {
      path: base,
      headers: { "a-im": "Incremental Feed", "x-ms-documentdb-partitionkeyrangeid": "0", "x-ms-max-item-count": "100", ...extra },
    });

  const empty = await cf({ "if-none-match": "*" });
  assert.equal(empty.status, 304, `empty feed from now: ${show(empty)}`);
  assert.equal(empty.text, "", "304 has no body");
  assert.match(empty.headers.etag ?? "", /^".+"$/, `304 carries a quoted etag: ${show(empty)}`);
  assert.match(empty.headers["x-ms-session-token"] ?? "", /^0:-1#\d+$/, `session token: ${show(empty)}`);

  for (let i = 0; i < 5; i++) {
    const r = await rawRequest(srv, { method: "POST", path: base, body: { id: `f${i}`, pk: "p", i }, headers: pkHeader("p") });
    assert.equal(r.status, 201, show(r));
  }
  const page = await cf({});
  assert.equal(page.status, 200, show(page));
  assert.equal(page.json.Documents.length, 5);
  assert.equal(page.json._count, 5);
  assert.equal(typeof page.json._rid, "string");
  assert.equal(page.headers["x-ms-item-count"], "5");
  const maxLsn = Math.max(...page.json.Documents.map((d) => d._lsn));
  assert.match(page.headers.etag ?? "", /^".+"$/, `200 page carries the cursor etag: ${show(page)}`);
  assert.equal(page.headers["x-ms-session-token"], `0:-1#${maxLsn}`, "session token holds the range's latest LSN");

  const idle = await cf({ "if-none-match": page.headers.etag });
  assert.equal(idle.status, 304, show(idle));
  assert.equal(idle.headers.etag, page.headers.etag, "the idle cursor stays put");
  assert.equal(idle.headers["x-ms-session-token"], `0:-1#${maxLsn}`);

  // A delete bumps the range LSN (session token) but shows nothing.
  const del = await rawRequest(srv, { method: "DELETE", path: `${base}/f0`, headers: pkHeader("p") });
  assert.equal(del.status, 204, show(del));
  const afterDel = await cf({ "if-none-match": page.headers.etag });
  assert.equal(afterDel.status, 304, `deletes never appear: ${show(afterDel)}`);
  const lsnAfterDel = Number(afterDel.headers["x-ms-session-token"].split("#")[1]);
  assert.ok(lsnAfterDel > maxLsn, `the delete advanced the range LSN (${lsnAfterDel} > ${maxLsn})`);

  // If-None-Match: * resolves to the current LSN: nothing, then the next write.
  const now = await cf({ "if-none-match": "*" });
  assert.equal(now.status, 304);
  await rawRequest(srv, { method: "POST", path: base, body: { id: "g", pk: "q" }, headers: pkHeader("q") });
  const next = await cf({ "if-none-match": now.headers.etag });
  assert.equal(next.status, 200, show(next));
  assert.deepEqual(next.json.Documents.map((d) => d.id), ["g"]);

  // Page size: x-ms-max-item-count 2 gives pages of 2 that chain by etag.
  let cursor;
  const ids = [];
  for (let n = 0; n < 10; n++) {
    const r = await cf({ "x-ms-max-item-count": "2", ...(cursor ? { "if-none-match": cursor } : {}) });
    if (r.status === 304) break;
    assert.equal(r.status, 200, show(r));
    assert.ok(r.json.Documents.length <= 2, "page respects x-ms-max-item-count");
    ids.push(...r.json.Documents.map((d) => d.id));
    cursor = r.headers.etag;
  }
  assert.deepEqual(ids, ["f1", "f2", "f3", "f4", "g"]);

  // Per partition key scope.
  const pq = await rawRequest(srv, { path: base, headers: { "a-im": "Incremental feed", ...pkHeader("q") } });
  assert.equal(pq.status, 200, show(pq));
  assert.deepEqual(pq.json.Documents.map((d) => d.id), ["g"]);

  // If-Modified-Since far in the future: nothing yet.
  const future = await cf({ "if-modified-since": rfc1123(new Date(Date.now() + 3600_000)) });
  assert.equal(future.status, 304, show(future));
});

test("pkranges: list with etag; incremental read with the current etag is 304", async () => {
  const path = `/dbs/${DB}/colls/${COLL}/pkranges`;
  const r = await rawRequest(srv, { path });
  assert.equal(r.status, 200, show(r));
  assert.equal(r.json.PartitionKeyRanges.length, 1);
  const pr = r.json.PartitionKeyRanges[0];
  assert.equal(pr.id, "0");
  assert.equal(pr.minInclusive, "");
  assert.equal(pr.maxExclusive, "FF");
  assert.ok(r.headers.etag, "pkranges answer carries an etag");
  const again = await rawRequest(srv, {
    path,
    headers: { "a-im": "Incremental Feed", "if-none-match": r.headers.etag, "x-ms-max-item-count": "-1" },
  });
  assert.equal(again.status, 304, `incremental pkranges with the current etag must be 304 (the .NET SDK loops until it): ${show(again)}`);
});

test("x-ms-activity-id is echoed on success and on error", async () => {
  const id = crypto.randomUUID();
  const ok = await rawRequest(srv, { path: `/dbs/${DB}`, headers: { "x-ms-activity-id": id } });
  assert.equal(ok.status, 200);
  assert.equal(ok.headers["x-ms-activity-id"], id);
  const id2 = crypto.randomUUID();
  const bad = await rawRequest(srv, { path: `/dbs/${DB}/colls/none`, headers: { "x-ms-activity-id": id2 } });
  assert.equal(bad.status, 404);
  assert.equal(bad.headers["x-ms-activity-id"], id2);
  const unauth = await rawRequest(srv, { path: "/", sign: false, headers: { "x-ms-activity-id": id2, "x-ms-date": rfc1123() } });
  assert.equal(unauth.status, 401);
  assert.equal(unauth.headers["x-ms-activity-id"], id2);
  const gen = await rawRequest(srv, { path: `/dbs/${DB}` });
  assert.ok(gen.headers["x-ms-activity-id"], "an activity id is generated when the client sends none");
});

test("the server is still up and answering after all of the above", async () => {
  for (const s of [srv, small]) {
    const r = await rawRequest(s, { path: "/" });
    assert.equal(r.status, 200, show(r));
    const d = await rawRequest(s, { path: `/dbs/${DB}/colls/${COLL}` });
    assert.equal(d.status, 200, show(d));
  }
});
