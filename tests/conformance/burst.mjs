// A client's burst (issue 29): one official SDK client fires thousands of
// requests at once (Promise.all, so the SDK opens a socket each). Shared by
// burst.test.mjs (default threading) and burst_pool.test.mjs (--threads 8):
// every request must end 2xx after the SDK's own retries and every document
// must be there. A hang-up (ECONNRESET, "socket hang up") is never retried by
// the SDK for a write, so one would leave the data half written.
import assert from "node:assert/strict";

import { uid } from "./harness.mjs";

/** Requests in one burst: twice the 1,024 connections cosmolite allowed before issue 29. */
export const BURST = 2000;

/**
 * The SDK client for a burst. The per-request timeout is long: on a loaded
 * two-core machine under the sanitizers 2,000 requests can queue for a while,
 * and a timeout is not what is tested here (a hang-up is).
 */
export function burstClient(srv) {
  return srv.client({ connectionPolicy: { requestTimeout: 120_000 } });
}

/** A container for one burst. */
export async function burstContainer(client) {
  const { database } = await client.databases.createIfNotExists({ id: uid("burstdb") });
  const { container } = await database.containers.createIfNotExists({
    id: uid("c"),
    partitionKey: { paths: ["/pk"], kind: "Hash", version: 2 },
  });
  return container;
}

/** A message naming what failed and how, with cosmolite's log tail. */
function failures(srv, what, results) {
  const bad = results.filter((r) => r.status === "rejected" || r.value.statusCode >= 300);
  if (bad.length === 0) return null;
  const kinds = new Map();
  for (const r of bad) {
    const k = r.status === "rejected" ? `${r.reason?.code ?? ""} ${r.reason?.message ?? r.reason}`.slice(0, 120) : `HTTP ${r.value.statusCode}`;
    kinds.set(k, (kinds.get(k) ?? 0) + 1);
  }
  const list = [...kinds].map(([k, n]) => `${n} x ${k}`).join("\n  ");
  return `${bad.length} of ${results.length} ${what} failed:\n  ${list}\ncosmolite's log:\n${srv.stderr().slice(-4000)}`;
}

/** The SDK's throttle retries behind a response (its x-ms-throttle-retry-count), 0 when none. */
export function throttleRetries(resp) {
  return Number(resp?.headers?.["x-ms-throttle-retry-count"] ?? 0);
}

/**
 * n concurrent upserts, then n concurrent point reads of what they wrote,
 * then a count of the container. Returns the responses of both bursts.
 */
export async function upsertAndReadBurst(srv, container, n = BURST) {
  const docs = Array.from({ length: n }, (_, i) => ({ id: `cust-${i}`, pk: `p${i % 37}`, name: `customer ${i}`, i }));

  const ups = await Promise.allSettled(docs.map((d) => container.items.upsert(d)));
  const upMsg = failures(srv, "concurrent upserts", ups);
  assert.equal(upMsg, null, upMsg ?? "");
  for (const r of ups) assert.ok(r.value.statusCode === 201 || r.value.statusCode === 200, `upsert: HTTP ${r.value.statusCode}`);

  const reads = await Promise.allSettled(docs.map((d) => container.item(d.id, d.pk).read()));
  const readMsg = failures(srv, "concurrent point reads", reads);
  assert.equal(readMsg, null, readMsg ?? "");
  reads.forEach((r, i) => {
    assert.equal(r.value.statusCode, 200, `read ${docs[i].id}`);
    assert.ok(r.value.resource, `document ${docs[i].id} is there`);
    assert.equal(r.value.resource.i, i, `document ${docs[i].id} holds what was written`);
  });

  const { resources } = await container.items.query("SELECT VALUE COUNT(1) FROM c").fetchAll();
  assert.deepEqual(resources, [n], `the container holds exactly the ${n} documents written`);
  return { ups: ups.map((r) => r.value), reads: reads.map((r) => r.value) };
}
