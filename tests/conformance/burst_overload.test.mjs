// Issue 29, past the connection limit: what cosmolite cannot take at once it
// answers, never hangs up on. A connection that has sent a complete request
// is answered (run, or 429/3092 with x-ms-retry-after-ms, which every SDK
// retries, writes included), while the guard still sheds idle sockets; the
// log and the stop summary count the 429s.
import assert from "node:assert/strict";
import net from "node:net";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import { BURST, burstClient, burstContainer, throttleRetries, upsertAndReadBurst } from "./burst.mjs";
import { createRawContainer, rawRequest, setFaults, show, startCosmolite } from "./harness.mjs";

/** The 429 count in cosmolite's stop summary ("connections: ... N requests answered 429/3092"). */
function summaryOverloaded(srv) {
  const m = /connections: peak \d+ open; (\d+) requests answered 429\/3092/.exec(srv.stderr());
  assert.ok(m, `cosmolite's stop summary counts the 429s:\n${srv.stderr().slice(-3000)}`);
  return Number(m[1]);
}

test(`${BURST} concurrent upserts and reads through a 512-connection table all succeed after the SDK's retries`, async (t) => {
  const srv = await startCosmolite(t, { args: ["--max-connections", "512"] });
  const container = await burstContainer(burstClient(srv));
  const { ups, reads } = await upsertAndReadBurst(srv, container);
  const retried = [...ups, ...reads].reduce((n, r) => n + throttleRetries(r), 0);

  await srv.stop();
  // Every 429 cosmolite answered is one the SDK saw and retried: none was lost on the way.
  assert.equal(summaryOverloaded(srv), retried, "429s answered = throttle retries the SDK made");
  assert.ok(retried > 0, "2,000 connections through 512 slots were throttled, not all let in");
  assert.match(srv.stderr(), /WARN  http: port \d+: \d+ requests answered 429\/3092 with a retry-after/, "a counted log line says so");
});

/** Reads from a socket until the server ends it; resolves how it ended. */
function watchSilent(sock) {
  return new Promise((resolve) => {
    sock.on("data", () => {});
    sock.on("error", (e) => resolve(`error ${e.code}`));
    sock.on("close", () => resolve("closed"));
  });
}

test("a connection with a complete request is answered, never reset, while the guard sheds idle ones", async (t) => {
  // One worker, held by a delayed request while a burst queues: when it comes
  // back it takes the burst's connections with their requests still unread,
  // past max - reserved (16 - 8). The old guard shed those (ECONNRESET).
  const srv = await startCosmolite(t, {
    memory: true,
    args: ["--threads", "1", "--max-connections", "16", "--reserved-connections", "8", "--request-timeout-s", "600"],
  });
  await createRawContainer(srv, "shed", "c");
  const silent = [];
  for (let i = 0; i < 6; i++) {
    const s = net.connect(srv.port, "127.0.0.1");
    await new Promise((resolve, reject) => s.once("connect", resolve).once("error", reject));
    silent.push({ sock: s, end: watchSilent(s) });
  }
  // Past the guard's 5 s grace for a silent socket before the burst is taken.
  await setFaults(srv, [{ op: "any", delayMs: 6000, count: 1 }]);
  const held = rawRequest(srv, { path: "/dbs/shed", timeoutMs: 120_000 });
  await sleep(500); // the worker is inside the delayed request now
  const burst = await Promise.allSettled(
    Array.from({ length: 24 }, () => rawRequest(srv, { path: "/dbs/shed/colls/c", timeoutMs: 120_000 })),
  );
  const first = await held;
  assert.equal(first.status, 200, show(first));

  const statuses = new Map();
  burst.forEach((r, i) => {
    assert.equal(r.status, "fulfilled", `request ${i} was not answered: ${r.reason?.code} ${r.reason?.message}\n${srv.stderr().slice(-3000)}`);
    const s = r.value.status;
    statuses.set(s, (statuses.get(s) ?? 0) + 1);
    assert.ok(s === 200 || s === 429, `request ${i}: ${show(r.value)}`);
    if (s === 429) {
      assert.equal(r.value.headers["x-ms-substatus"], "3092", show(r.value));
      assert.match(r.value.headers["x-ms-retry-after-ms"] ?? "", /^\d+$/, "a 429 says when to retry");
      assert.equal(r.value.headers.connection, "close", "and closes the connection it had no room for");
    }
  });
  // The idle sockets were what went: every silent one is closed by the server.
  const ends = await Promise.race([Promise.all(silent.map((s) => s.end)), sleep(60_000).then(() => null)]);
  assert.ok(ends, "the server closed the silent sockets");
  for (const s of silent) s.sock.destroy();
  await srv.stop();
  assert.match(srv.stderr(), /connections: peak \d+ open; \d+ requests answered 429\/3092 at the connection limit \(\d+ connections past it\), [1-9]\d* idle or slow connections shed/);
  t.diagnostic(`statuses: ${JSON.stringify([...statuses])}`);
});
