// Conformance harness: runs a private cosmolite for a test file and hands out
// clients of the official @azure/cosmos SDK (the referee) plus raw-HTTP helpers
// that sign requests exactly as PROTOCOL.md section 1 describes.
//
// Contract:
//   const srv = await startCosmolite(t, { partitions: 4 });
//   srv.endpoint, srv.key, srv.port, srv.dataDir
//   srv.client(opts)   -> a new CosmosClient (disposed by stop())
//   srv.restart()      -> SIGTERM, expect a clean exit (code 0), start again on
//                         the same data dir and port
//   srv.kill9()        -> SIGKILL, wait for the process to go (no restart)
//   srv.start()        -> start again after kill9() (same data dir and port)
//   srv.stop()         -> dispose clients, SIGTERM, expect exit code 0, delete
//                         the data dir; throws if cosmolite had died on its own
//   srv.stderr()       -> what cosmolite wrote to stderr (last 256 KiB)
//
// Cleanup never depends on the test passing: the server is stopped by the
// test context's after() hook when a context is given, and every process still
// alive is SIGKILLed when the test process exits (normally or by signal).

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { CosmosClient } from "@azure/cosmos";
import { after, before } from "node:test";

/** The well-known emulator key; cosmolite's default. */
export const EMULATOR_KEY =
  "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";

const START_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 10_000;
const STDERR_CAP = 256 * 1024;
/** Per-request timeout for SDK clients, so a stuck server fails a test instead of hanging it. */
const SDK_REQUEST_TIMEOUT_MS = 15_000;

// Every cosmolite this process started and has not reaped yet.
const live = new Set();

function killAllSync() {
  for (const srv of live) {
    try {
      srv._proc?.kill("SIGKILL");
    } catch {
      // already gone
    }
    try {
      fs.rmSync(srv._tmpDir, { recursive: true, force: true });
    } catch {
      // best effort
    }
  }
  live.clear();
}

process.on("exit", killAllSync);
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    killAllSync();
    process.exit(128 + os.constants.signals[sig]);
  });
}

function binaryPath() {
  const bin = process.env.COSMOLITE_BIN;
  if (!bin) {
    throw new Error("COSMOLITE_BIN is not set: point it at the cosmolite binary");
  }
  if (!fs.existsSync(bin)) {
    throw new Error(`COSMOLITE_BIN=${bin} does not exist`);
  }
  return bin;
}

class Cosmolite {
  constructor(opts) {
    this.opts = opts;
    this.key = opts.key ?? EMULATOR_KEY;
    this._tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), "cosmolite-conf-"));
    this.dataDir = opts.memory ? null : path.join(this._tmpDir, "data");
    if (this.dataDir) fs.mkdirSync(this.dataDir);
    this._portFile = path.join(this._tmpDir, "port");
    this.port = 0;
    this.endpoint = null;
    this._proc = null;
    this._exit = null; // {code, signal} once the current process is gone
    this._exitPromise = null;
    this._expectExit = false;
    this._stderr = "";
    this._clients = [];
    live.add(this);
  }

  /** What cosmolite has written to stderr, for failure messages. */
  stderr() {
    return this._stderr;
  }

  _args() {
    const o = this.opts;
    // regions: a --regions spec instead of --listen (the port file gets the first region's port).
    const args = o.regions
      ? ["--regions", o.regions, "--port-file", this._portFile]
      : ["--listen", `127.0.0.1:${this.port}`, "--port-file", this._portFile];
    if (o.memory) args.push("--memory");
    else args.push("--data", this.dataDir);
    if (o.key) args.push("--key", o.key);
    if (o.partitions !== undefined) args.push("--partitions", String(o.partitions));
    if (o.maxRequestBytes !== undefined) args.push("--max-request-bytes", String(o.maxRequestBytes));
    if (o.logLevel) args.push("--log-level", o.logLevel);
    if (o.args) args.push(...o.args);
    return args;
  }

  /** Starts the process and waits until it has written its port file. */
  async start() {
    if (this._proc && !this._exit) throw new Error("cosmolite is already running");
    fs.rmSync(this._portFile, { force: true });
    this._stderr += `--- start ${new Date().toISOString()} ${this._args().join(" ")}\n`;
    const proc = spawn(binaryPath(), this._args(), { stdio: ["ignore", "ignore", "pipe"] });
    this._proc = proc;
    this._exit = null;
    this._expectExit = false;
    proc.stderr.setEncoding("utf8");
    proc.stderr.on("data", (chunk) => {
      this._stderr += chunk;
      if (this._stderr.length > STDERR_CAP) this._stderr = this._stderr.slice(-STDERR_CAP);
    });
    this._exitPromise = new Promise((resolve) => {
      proc.on("error", (e) => {
        this._stderr += `spawn error: ${e.message}\n`;
      });
      proc.on("close", (code, signal) => {
        this._exit = { code, signal };
        if (!this._expectExit && this.endpoint) {
          // Say so at once: SDK calls against a dead server retry for up to
          // two minutes before failing, which would hide the cause.
          process.stderr.write(
            `\n*** cosmolite on port ${this.port} died on its own (code ${code}, signal ${signal}); stderr:\n` +
              `${this._stderr.slice(-8192)}\n`,
          );
        }
        resolve(this._exit);
      });
    });

    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (this._exit) {
        throw new Error(
          `cosmolite exited during startup (code ${this._exit.code}, signal ${this._exit.signal}):\n` +
            this._stderr,
        );
      }
      let text = "";
      try {
        text = fs.readFileSync(this._portFile, "utf8");
      } catch {
        // not written yet
      }
      const m = /^(\d+)\n$/.exec(text);
      if (m) {
        const port = Number(m[1]);
        if (port <= 0 || port > 65535) throw new Error(`port file holds a bad port: ${JSON.stringify(text)}`);
        if (this.port !== 0 && port !== this.port) {
          throw new Error(`cosmolite restarted on port ${port}, asked for ${this.port}`);
        }
        this.port = port;
        this.endpoint = `http://127.0.0.1:${port}/`;
        return this;
      }
      if (Date.now() > deadline) {
        proc.kill("SIGKILL");
        await this._exitPromise;
        throw new Error(
          `cosmolite did not write its port file within ${START_TIMEOUT_MS} ms; stderr:\n${this._stderr}`,
        );
      }
      await sleep(20);
    }
  }

  /** Throws when the current process died without being asked to. */
  _checkNotCrashed(what) {
    if (this._exit && !this._expectExit) {
      throw new Error(
        `${what}: cosmolite had died on its own (code ${this._exit.code}, signal ${this._exit.signal}):\n` +
          this._stderr,
      );
    }
  }

  async _waitExit(ms) {
    let timer;
    const timeout = new Promise((resolve) => {
      timer = setTimeout(() => resolve(null), ms);
    });
    const r = await Promise.race([this._exitPromise, timeout]);
    clearTimeout(timer);
    return r;
  }

  /** SIGTERM and wait; a clean shutdown is exit code 0 within STOP_TIMEOUT_MS. */
  async _terminate(what) {
    if (!this._proc || this._exit) return;
    this._expectExit = true;
    this._proc.kill("SIGTERM");
    const r = await this._waitExit(STOP_TIMEOUT_MS);
    if (!r) {
      this._proc.kill("SIGKILL");
      await this._exitPromise;
      throw new Error(`${what}: cosmolite ignored SIGTERM for ${STOP_TIMEOUT_MS} ms; stderr:\n${this._stderr}`);
    }
    if (r.code !== 0) {
      throw new Error(
        `${what}: cosmolite exited with code ${r.code} signal ${r.signal} after SIGTERM; stderr:\n${this._stderr}`,
      );
    }
  }

  /** Graceful restart on the same data dir and port. */
  async restart() {
    this._checkNotCrashed("restart");
    await this._terminate("restart");
    return this.start();
  }

  /** kill -9 and wait until the process is gone. Call start() to bring it back. */
  async kill9() {
    this._checkNotCrashed("kill9");
    if (!this._proc || this._exit) return;
    this._expectExit = true;
    this._proc.kill("SIGKILL");
    await this._exitPromise;
  }

  /**
   * A new SDK client for this server. Nothing is switched off that a real user
   * would keep: endpoint discovery stays on (the SDK reads GET / and follows
   * writableLocations); only the per-request timeout is bounded.
   */
  client(extra = {}) {
    const c = new CosmosClient({
      endpoint: this.endpoint,
      key: this.key,
      ...extra,
      connectionPolicy: { requestTimeout: SDK_REQUEST_TIMEOUT_MS, ...(extra.connectionPolicy ?? {}) },
    });
    this._clients.push(c);
    return c;
  }

  /** Stops everything this server owns. Safe to call twice. */
  async stop() {
    for (const c of this._clients.splice(0)) {
      try {
        c.dispose();
      } catch {
        // a disposed client is fine
      }
    }
    try {
      this._checkNotCrashed("stop");
      await this._terminate("stop");
    } finally {
      if (this._proc && !this._exit) {
        this._proc.kill("SIGKILL");
        await this._exitPromise;
      }
      fs.rmSync(this._tmpDir, { recursive: true, force: true });
      live.delete(this);
    }
  }
}

/**
 * Starts a cosmolite with a fresh temp data dir. `t` is a node:test context
 * (or anything with after()) whose end stops the server; pass null to manage
 * it yourself. Options: partitions, memory, key, maxRequestBytes, logLevel, regions, args.
 */
export async function startCosmolite(t, opts = {}) {
  const srv = new Cosmolite(opts);
  if (t && typeof t.after === "function") t.after(() => srv.stop());
  try {
    await srv.start();
  } catch (e) {
    live.delete(srv);
    fs.rmSync(srv._tmpDir, { recursive: true, force: true });
    throw e;
  }
  return srv;
}

/** A unique, readable resource id. */
export function uid(prefix = "x") {
  return `${prefix}-${crypto.randomUUID().slice(0, 8)}`;
}

/**
 * Reads a change-feed iterator (getChangeFeedIterator) until it reports 304.
 * Returns {items, pages, last} where last is the final (304) response.
 * Bounded: fails after maxPages pages so a feed that never ends cannot hang a test.
 */
export async function drainChangeFeed(iterator, { maxPages = 500 } = {}) {
  const items = [];
  let pages = 0;
  for (;;) {
    if (pages >= maxPages) throw new Error(`change feed did not report 304 within ${maxPages} pages`);
    const res = await iterator.readNext();
    pages++;
    if (res.statusCode === 304) return { items, pages, last: res };
    if (res.statusCode !== 200) throw new Error(`unexpected change feed status ${res.statusCode}`);
    items.push(...res.result);
  }
}

// ---------------------------------------------------------------------------
// Raw HTTP with master-key signing (PROTOCOL.md section 1).

/** RFC 1123 date as Cosmos wants it ("Tue, 01 Apr 2025 12:00:00 GMT"). */
export function rfc1123(date = new Date()) {
  return date.toUTCString();
}

/** HMAC-SHA256 signature over the five-line payload; returns standard base64. */
export function signature({ verb, resourceType, resourceLink, date, key = EMULATOR_KEY, dateLine, line5 = "" }) {
  const line4 = dateLine !== undefined ? dateLine : date.toLowerCase();
  const payload = `${verb.toLowerCase()}\n${resourceType.toLowerCase()}\n${resourceLink}\n${line4}\n${line5}\n`;
  return crypto.createHmac("sha256", Buffer.from(key, "base64")).update(payload, "utf8").digest("base64");
}

/**
 * The authorization header value. encoding: "upper" (JS/Python style %3D),
 * "lower" (.NET style %3d) or "none" (raw).
 */
export function authHeader(sig, encoding = "upper") {
  const raw = `type=master&ver=1.0&sig=${sig}`;
  if (encoding === "none") return raw;
  const enc = encodeURIComponent(raw);
  return encoding === "lower" ? enc.replace(/%[0-9A-F]{2}/g, (m) => m.toLowerCase()) : enc;
}

/**
 * Derives resourceType and resourceLink from a URL path, name-based
 * (PROTOCOL.md section 1): ids are percent-decoded, case kept.
 */
export function resourceFor(urlPath) {
  const p = urlPath.split("?")[0].replace(/^\/+|\/+$/g, "");
  if (p === "") return { resourceType: "", resourceLink: "" };
  const segs = p.split("/").map((s) => decodeURIComponent(s));
  if (segs.length % 2 === 0) {
    return { resourceType: segs[segs.length - 2], resourceLink: segs.join("/") };
  }
  return { resourceType: segs[segs.length - 1], resourceLink: segs.slice(0, -1).join("/") };
}

/**
 * One HTTP request to the server. By default it is signed with the server's
 * key and a current x-ms-date; pass sign:false to send headers as given, or
 * sign:{...} to override pieces (date, key, verb, resourceType, resourceLink,
 * encoding, dateLine, line5, noXmsDate, tamper). body may be a string, Buffer or object (JSON-encoded).
 * Resolves {status, headers, text, json} (json null when the body is not JSON).
 * Never hangs: rejects after timeoutMs.
 */
export function rawRequest(srv, { method = "GET", path: urlPath = "/", headers = {}, body, sign = {}, timeoutMs = 15_000 }) {
  const h = {};
  for (const [k, v] of Object.entries(headers)) if (v !== undefined) h[k.toLowerCase()] = v;
  if (!("x-ms-version" in h)) h["x-ms-version"] = "2020-07-15";
  if (!("accept" in h)) h.accept = "application/json";
  let payload;
  if (body !== undefined) {
    payload = Buffer.isBuffer(body) ? body : Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
    if (!("content-type" in h)) h["content-type"] = "application/json";
  }
  if (sign !== false) {
    const date = sign.date ?? rfc1123();
    if (!("x-ms-date" in h) && sign.noXmsDate !== true) h["x-ms-date"] = date;
    const derived = resourceFor(urlPath);
    const sig = signature({
      verb: sign.verb ?? method,
      resourceType: sign.resourceType ?? derived.resourceType,
      resourceLink: sign.resourceLink ?? derived.resourceLink,
      date,
      key: sign.key ?? srv.key,
      dateLine: sign.dateLine,
      line5: sign.line5,
    });
    h.authorization = authHeader(sign.tamper ? sign.tamper(sig) : sig, sign.encoding ?? "upper");
  }
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port: srv.port, method, path: urlPath, headers: h, agent: false },
      (res) => {
        const chunks = [];
        res.on("data", (c) => chunks.push(c));
        res.on("end", () => {
          clearTimeout(timer);
          const text = Buffer.concat(chunks).toString("utf8");
          let json = null;
          try {
            json = text ? JSON.parse(text) : null;
          } catch {
            json = null;
          }
          resolve({ status: res.statusCode, headers: res.headers, text, json });
        });
        res.on("error", (e) => {
          clearTimeout(timer);
          reject(e);
        });
      },
    );
    const timer = setTimeout(() => {
      req.destroy(new Error(`${method} ${urlPath}: no response within ${timeoutMs} ms`));
    }, timeoutMs);
    req.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    if (payload) req.end(payload);
    else req.end();
  });
}

/** A short description of a raw response for assertion messages. */
export function show(res) {
  const hdr = ["x-ms-substatus", "etag", "x-ms-session-token"]
    .filter((k) => res.headers[k] !== undefined)
    .map((k) => `${k}: ${res.headers[k]}`)
    .join(", ");
  return `HTTP ${res.status} ${hdr} body=${res.text.slice(0, 400)}`;
}

// ---------------------------------------------------------------------------
// Assertion helpers shared by the test files.

/**
 * A predicate for assert.rejects: the SDK error carries HTTP status `status`
 * (and substatus `sub` when given). Anything else fails with the error shown.
 */
export function httpCode(status, sub) {
  return (e) => {
    if (e?.code !== status || (sub !== undefined && e?.substatus !== sub)) {
      throw new Error(
        `expected HTTP ${status}${sub !== undefined ? "/" + sub : ""}, got ${e?.code}/${e?.substatus}: ${e?.message}`,
        { cause: e },
      );
    }
    return true;
  };
}

/** The bytes of a Cosmos _rid (base64 with '/' written as '-'). */
export function ridBytes(rid) {
  return Buffer.from(rid.replace(/-/g, "/"), "base64");
}

let epkModule;
/**
 * The SDK's own V2 effective partition key of a value, as uppercase hex. It is
 * the referee's hash (an internal module of @azure/cosmos, loaded by file path).
 */
export async function sdkEpk(value) {
  if (!epkModule) {
    epkModule = await import(
      new URL("./node_modules/@azure/cosmos/dist/esm/utils/hashing/v2.js", import.meta.url).href
    );
  }
  return epkModule.hashV2PartitionKey([value === undefined ? {} : value]);
}

// ---------------------------------------------------------------------------
// Helpers for the issue-3 files (patch, batch, queries, TTL, splits, faults).

/** The x-ms-documentdb-partitionkey header for a value; undefined (property missing) is [{}]. */
export function pkHeaders(value) {
  return { "x-ms-documentdb-partitionkey": value === undefined ? "[{}]" : JSON.stringify([value]) };
}

/**
 * One request to cosmolite's admin API (/_admin/<what>), signed like any
 * request with resource type "_admin" and link "_admin/<what>".
 * Resolves the raw response ({status, headers, text, json}).
 */
export function adminRequest(srv, method, what, body) {
  return rawRequest(srv, { method, path: `/_admin/${what}`, body });
}

/** Replaces the fault rules (PUT /_admin/faults); throws unless 200. Returns the rule listing. */
export async function setFaults(srv, rules, seed = 1) {
  const r = await adminRequest(srv, "PUT", "faults", { seed, rules });
  if (r.status !== 200) throw new Error(`PUT /_admin/faults ${JSON.stringify(rules)}: ${show(r)}`);
  return r.json;
}

/** Removes every fault rule (DELETE /_admin/faults); throws unless 200. */
export async function clearFaults(srv) {
  const r = await adminRequest(srv, "DELETE", "faults");
  if (r.status !== 200) throw new Error(`DELETE /_admin/faults: ${show(r)}`);
  return r.json;
}

/** The current fault rules with their firing counts (GET /_admin/faults); throws unless 200. */
export async function getFaults(srv) {
  const r = await adminRequest(srv, "GET", "faults");
  if (r.status !== 200) throw new Error(`GET /_admin/faults: ${show(r)}`);
  return r.json;
}

/** Splits a partition key range (POST /_admin/split); resolves the raw response. */
export function splitRange(srv, db, coll, range, at) {
  return adminRequest(srv, "POST", "split", at === undefined ? { db, coll, range } : { db, coll, range, at });
}

/**
 * Reads a query iterator page by page with fetchNext until hasMoreResults is
 * false. Returns {items, pages} (pages = the result array of each call).
 * Bounded: fails after maxPages calls so a query that never ends cannot hang a test.
 */
export async function drainQuery(iterator, { maxPages = 1000 } = {}) {
  const items = [];
  const pages = [];
  while (iterator.hasMoreResults()) {
    if (pages.length >= maxPages) throw new Error(`query did not end within ${maxPages} pages`);
    const r = await iterator.fetchNext();
    pages.push(r.resources);
    items.push(...r.resources);
  }
  return { items, pages };
}

/** Strips the server-added system properties (_rid, _self, _etag, _ts, _attachments, _lsn). */
export function userFields(doc) {
  const out = {};
  for (const [k, v] of Object.entries(doc)) {
    if (!["_rid", "_self", "_etag", "_ts", "_attachments", "_lsn"].includes(k)) out[k] = v;
  }
  return out;
}

/**
 * Starts a cosmolite (startCosmolite(null, opts)) and creates a database with
 * a fresh id through the SDK. Resolves {srv, client, database}; the caller
 * stops srv. If the database cannot be created the server is stopped first.
 */
export async function startWithDatabase(opts = {}) {
  const srv = await startCosmolite(null, opts);
  try {
    const client = srv.client();
    const { database } = await client.databases.create({ id: uid("db") });
    return { srv, client, database };
  } catch (e) {
    await srv.stop();
    throw e;
  }
}

/**
 * The usual frame of a test file: one cosmolite with a database for all of
 * the file's tests, started in before() and stopped in after(). set receives
 * {srv, client, database} once they exist (the file keeps them in its own
 * variables: `useDatabase((e) => ({ srv, client, database } = e))`); it may
 * be async, to make the file's containers.
 */
export function useDatabase(set, opts = {}) {
  let srv;
  before(async () => {
    const env = await startWithDatabase(opts);
    srv = env.srv;
    await set(env);
  });
  after(async () => {
    await srv?.stop();
  });
}

/**
 * useDatabase plus one container for the file (a fresh id, partition key
 * /pk): set receives {srv, client, database, container, collId, docsPath}
 * (docsPath: /dbs/<db>/colls/<coll>/docs for raw requests); it may be
 * async, to fill the container.
 */
export function useContainer(set, opts = {}) {
  useDatabase(async (e) => {
    const collId = uid("coll");
    const { container } = await e.database.containers.create({ id: collId, partitionKey: "/pk" });
    await set({ ...e, container, collId, docsPath: `/dbs/${e.database.id}/colls/${collId}/docs` });
  }, opts);
}

/**
 * Creates database `db` and its container `coll` (partition key /pk, hash v2)
 * with raw requests; throws unless both answer 201.
 */
export async function createRawContainer(srv, db, coll) {
  let r = await rawRequest(srv, { method: "POST", path: "/dbs", body: { id: db } });
  if (r.status !== 201) throw new Error(`POST /dbs ${db}: ${show(r)}`);
  r = await rawRequest(srv, {
    method: "POST",
    path: `/dbs/${db}/colls`,
    body: { id: coll, partitionKey: { paths: ["/pk"], kind: "Hash", version: 2 } },
  });
  if (r.status !== 201) throw new Error(`POST /dbs/${db}/colls ${coll}: ${show(r)}`);
}

/** A document's identity across logical partitions: `<pk JSON>|<id>`. */
export const docKey = (doc) => `${JSON.stringify(doc.pk)}|${doc.id}`;

/**
 * Upserts docs {id: k<i>, pk: pk-<i>, v} for i in [from, to), each in its own
 * logical partition, one at a time. Resolves the documents written.
 */
export async function writeRange(container, from, to, v = 1) {
  const out = [];
  for (let i = from; i < to; i++) {
    const d = { id: `k${i}`, pk: `pk-${i}`, v };
    await container.items.upsert(d);
    out.push(d);
  }
  return out;
}

/**
 * A container with a fresh id (partition key /pk) in database, through the
 * SDK. Resolves {container, id, rid}.
 */
export async function newContainer(database) {
  const id = uid("coll");
  const { container, resource } = await database.containers.create({ id, partitionKey: "/pk" });
  return { container, id, rid: resource._rid };
}

/** The container's partition key ranges (readPartitionKeyRanges), sorted by minInclusive. */
export async function sortedRanges(container) {
  const { resources } = await container.readPartitionKeyRanges().fetchAll();
  return [...resources].sort((a, b) => (a.minInclusive < b.minInclusive ? -1 : 1));
}

/** Asserts that the ranges of list cover "" to FF without gap or overlap. */
export function assertCovering(list, what) {
  assert.equal(list[0].minInclusive, "", `${what}: starts at ""`);
  assert.equal(list[list.length - 1].maxExclusive, "FF", `${what}: ends at FF`);
  for (let i = 1; i < list.length; i++) assert.equal(list[i].minInclusive, list[i - 1].maxExclusive, `${what}: contiguous`);
}

/**
 * Asserts that the change-feed items hold no change twice (same key and
 * version, field v) and exactly the expected latest versions.
 */
export function assertChanges(items, expected, what) {
  const seen = new Set();
  const dupes = [];
  const latest = new Map();
  for (const it of items) {
    const k = `${docKey(it)}@${it.v}`;
    if (seen.has(k)) dupes.push(k);
    seen.add(k);
    const key = docKey(it);
    if (!latest.has(key) || latest.get(key).v < it.v) latest.set(key, it);
  }
  const want = new Map(expected.map((e) => [docKey(e), e]));
  const missing = [...want.keys()].filter((k) => !latest.has(k) || latest.get(k).v !== want.get(k).v);
  const extra = [...latest.keys()].filter((k) => !want.has(k));
  assert.deepEqual({ dupes, missing, extra }, { dupes: [], missing: [], extra: [] }, what);
}
