// Patch (PROTOCOL.md section 4) through the official SDK, plus raw HTTP for
// the two body shapes: every operation (add, set, replace, remove, incr,
// move) on members and array indexes, "-", JSON-pointer escapes; the error
// cases (missing target, > 10 ops, id / partition key / system properties,
// missing document); conditional patch and If-Match; atomicity; the change feed.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ChangeFeedStartFrom } from "@azure/cosmos";

import { drainChangeFeed, httpCode as code, pkHeaders, rawRequest, show, uid, useContainer, userFields } from "./harness.mjs";

let srv, client, database, container, collId;

useContainer((e) => ({ srv, client, database, container, collId } = e));

const BASE = {
  pk: "p",
  a: 1,
  s: "x",
  arr: [1, 2, 3],
  obj: { x: 1, inner: { deep: true } },
  "a/b": 1,
  "m~n": 2,
  cnt: 5,
  f: 1.5,
  gone: true,
  mv: { deep: 1 },
  status: "Pending",
};

async function fresh(extra = {}) {
  const doc = { id: uid("d"), ...structuredClone(BASE), ...extra };
  const { resource } = await container.items.create(doc);
  return { doc, stored: resource };
}

/** Patches and checks the response document equals `expected` (user fields) and so does a read. */
async function patchAndCheck(id, pk, body, expected, what) {
  const res = await container.item(id, pk).patch(body);
  assert.equal(res.statusCode, 200, `${what}: status`);
  assert.deepEqual(userFields(res.resource), expected, `${what}: response document`);
  const { resource } = await container.item(id, pk).read();
  assert.deepEqual(userFields(resource), expected, `${what}: stored document`);
  assert.equal(res.etag, resource._etag, `${what}: etag header equals the stored _etag`);
  return res;
}

test("every operation on members: add, set, replace, remove, incr (int, float, negative, absent), move", async () => {
  const { doc, stored } = await fresh();
  const want = structuredClone(doc);
  want.newf = "v"; // add creates
  want.s = "y"; // set overwrites
  want.a = 2; // add on an existing member overwrites
  want.obj.x = 2; // replace
  delete want.gone; // remove
  want.cnt = 8; // incr int
  want.f = 1.0; // incr float, negative
  want.fresh = 7; // incr on an absent field creates it
  want.moved = { deep: 1 }; // move
  delete want.mv;
  want.obj.inner.added = [1]; // add below an existing parent
  const res = await patchAndCheck(
    doc.id,
    doc.pk,
    [
      { op: "add", path: "/newf", value: "v" },
      { op: "set", path: "/s", value: "y" },
      { op: "add", path: "/a", value: 2 },
      { op: "replace", path: "/obj/x", value: 2 },
      { op: "remove", path: "/gone" },
      { op: "incr", path: "/cnt", value: 3 },
      { op: "incr", path: "/f", value: -0.5 },
      { op: "incr", path: "/fresh", value: 7 },
      { op: "move", from: "/mv", path: "/moved" },
      { op: "add", path: "/obj/inner/added", value: [1] },
    ],
    want,
    "ten member operations",
  );
  assert.notEqual(res.etag, stored._etag, "a patch yields a new etag");
  assert.ok(res.resource._ts >= stored._ts);
  // Integer increments stay integers on the wire.
  const raw = await rawRequest(srv, { path: `/dbs/${database.id}/colls/${collId}/docs/${doc.id}`, headers: pkHeaders("p") });
  assert.match(raw.text, /"cnt":8[,}]/, `incr of an integer by an integer is an integer: ${raw.text}`);
  // incr by a float turns an integer into a float; by a negative number decrements.
  await patchAndCheck(doc.id, doc.pk, [{ op: "incr", path: "/cnt", value: 0.25 }, { op: "incr", path: "/fresh", value: -10 }], { ...want, cnt: 8.25, fresh: -3 }, "incr float / negative");
});

test("array operations: add inserts at an index, '-' appends, set overwrites, replace, remove, incr and move on elements", async () => {
  const { doc } = await fresh({ arr: [10, 20, 30], list: ["a", "b"], nested: [{ n: 1 }, { n: 2 }] });
  const want = structuredClone(doc);
  want.arr = [5, 10, 99, 20, 30, 40]; // add /arr/1 99, add /arr/0 5 ... computed below in order
  await patchAndCheck(
    doc.id,
    doc.pk,
    [
      { op: "add", path: "/arr/1", value: 99 }, // [10,99,20,30]
      { op: "add", path: "/arr/-", value: 40 }, // [10,99,20,30,40]
      { op: "add", path: "/arr/0", value: 5 }, // [5,10,99,20,30,40]
    ],
    want,
    "add at index, '-' and 0",
  );
  want.arr = [5, 10, 99, 20, 30, 40, 41]; // add at index == length appends
  await patchAndCheck(doc.id, doc.pk, [{ op: "add", path: "/arr/6", value: 41 }], want, "add at index == length");

  want.arr = [6, 10, 99, 20, 30, 40, 41];
  want.list = ["a", "B"];
  want.nested = [{ n: 1 }, { n: 3 }];
  await patchAndCheck(
    doc.id,
    doc.pk,
    [
      { op: "set", path: "/arr/0", value: 6 }, // set on an index overwrites, does not insert
      { op: "replace", path: "/list/1", value: "B" },
      { op: "incr", path: "/nested/1/n", value: 1 },
    ],
    want,
    "set / replace / incr on elements",
  );

  want.arr = [6, 99, 20, 30, 40, 41];
  want.list = ["a"];
  want.first = "B";
  await patchAndCheck(
    doc.id,
    doc.pk,
    [
      { op: "remove", path: "/arr/1" },
      { op: "move", from: "/list/1", path: "/first" },
    ],
    want,
    "remove / move an element",
  );
  want.list = ["a", "z"];
  delete want.first;
  await patchAndCheck(doc.id, doc.pk, [{ op: "move", from: "/first", path: "/list/-" }, { op: "set", path: "/list/1", value: "z" }], want, "move into an array with '-'");
});

test("JSON-pointer escapes: ~1 is '/', ~0 is '~'", async () => {
  const { doc } = await fresh();
  const want = structuredClone(doc);
  want["a/b"] = 10;
  want["m~n"] = 20;
  want["x~/y"] = true;
  want.obj["k/1"] = "s";
  await patchAndCheck(
    doc.id,
    doc.pk,
    [
      { op: "set", path: "/a~1b", value: 10 },
      { op: "replace", path: "/m~0n", value: 20 },
      { op: "add", path: "/x~0~1y", value: true },
      { op: "add", path: "/obj/k~11", value: "s" },
    ],
    want,
    "escaped paths",
  );
  delete want["a/b"];
  await patchAndCheck(doc.id, doc.pk, [{ op: "remove", path: "/a~1b" }], want, "remove an escaped member");
});

test("body shapes: the SDK's bare array, and {operations} by raw HTTP with either content type", async () => {
  const { doc } = await fresh();
  const path = `/dbs/${database.id}/colls/${collId}/docs/${doc.id}`;
  const bare = await rawRequest(srv, { method: "PATCH", path, headers: pkHeaders("p"), body: [{ op: "set", path: "/s", value: "bare" }] });
  assert.equal(bare.status, 200, `bare array: ${show(bare)}`);
  assert.equal(bare.json.s, "bare");
  assert.equal(bare.headers.etag, bare.json._etag);
  const wrapped = await rawRequest(srv, {
    method: "PATCH",
    path,
    headers: { ...pkHeaders("p"), "content-type": "application/json_patch+json" },
    body: { operations: [{ op: "set", path: "/s", value: "wrapped" }] },
  });
  assert.equal(wrapped.status, 200, `{operations}: ${show(wrapped)}`);
  assert.equal(wrapped.json.s, "wrapped");
  assert.deepEqual(userFields(wrapped.json), { ...doc, s: "wrapped" }, "only /s changed");
  const minimal = await rawRequest(srv, {
    method: "PATCH",
    path,
    headers: { ...pkHeaders("p"), prefer: "return=minimal" },
    body: [{ op: "incr", path: "/cnt", value: 1 }],
  });
  assert.equal(minimal.status, 200, show(minimal));
  assert.equal(minimal.text, "", "Prefer: return=minimal leaves the body out");
  assert.ok(minimal.headers.etag, "but keeps the etag");
  for (const body of [{}, { operations: "x" }, "not json", { operations: [{ op: "set", value: 1 }] }, { operations: [{ op: "explode", path: "/a" }] }, { operations: [{ op: "set", path: "a", value: 1 }] }]) {
    const r = await rawRequest(srv, { method: "PATCH", path, headers: pkHeaders("p"), body });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${show(r)}`);
  }
});

/** Expects a 400 from the patch and the document unchanged. */
async function rejects400(doc, ops, what, match) {
  const before = (await container.item(doc.id, doc.pk).read()).resource;
  await assert.rejects(container.item(doc.id, doc.pk).patch(ops), (e) => {
    code(400)(e);
    if (match) assert.match(e.message, match, `${what}: message`);
    return true;
  }, what);
  const after = (await container.item(doc.id, doc.pk).read()).resource;
  assert.deepEqual(after, before, `${what}: a failed patch changes nothing (not even _etag/_ts)`);
}

test("missing targets and bad operations are 400 and apply nothing", async () => {
  const { doc } = await fresh();
  await rejects400(doc, [{ op: "replace", path: "/nope", value: 1 }], "replace of a missing member");
  await rejects400(doc, [{ op: "remove", path: "/nope" }], "remove of a missing member");
  await rejects400(doc, [{ op: "remove", path: "/arr/3" }], "remove past the end of an array");
  await rejects400(doc, [{ op: "replace", path: "/arr/7", value: 1 }], "replace past the end of an array");
  await rejects400(doc, [{ op: "set", path: "/arr/5", value: 1 }], "set past index == length");
  await rejects400(doc, [{ op: "add", path: "/arr/4", value: 1 }], "add past index == length");
  await rejects400(doc, [{ op: "add", path: "/no/such/parent", value: 1 }], "add below a missing parent");
  await rejects400(doc, [{ op: "set", path: "/obj/missing/x", value: 1 }], "set below a missing parent");
  await rejects400(doc, [{ op: "incr", path: "/s", value: 1 }], "incr of a string");
  await rejects400(doc, [{ op: "incr", path: "/cnt", value: "1" }], "incr by a non-number");
  await rejects400(doc, [{ op: "move", from: "/nope", path: "/x" }], "move from a missing member");
  await rejects400(doc, [{ op: "move", from: "/obj", path: "/obj/inner/x" }], "move into its own child");
  await rejects400(doc, [{ op: "add", path: "/arr/x", value: 1 }], "non-numeric array index");
  // All or nothing: earlier successful operations are rolled back.
  await rejects400(
    doc,
    [
      { op: "set", path: "/s", value: "changed" },
      { op: "incr", path: "/cnt", value: 1 },
      { op: "remove", path: "/nope" },
    ],
    "third op fails",
  );
});

test("more than 10 operations is 400; exactly 10 is fine", async () => {
  const { doc } = await fresh();
  const ops = (n) => Array.from({ length: n }, (_, i) => ({ op: "set", path: `/f${i}`, value: i }));
  await rejects400(doc, ops(11), "11 operations");
  const res = await container.item(doc.id, doc.pk).patch(ops(10));
  assert.equal(res.statusCode, 200);
  assert.equal(res.resource.f9, 9);
});

test("touching id, the partition key or system properties is 400 naming the operation's index", async () => {
  const { doc } = await fresh();
  const filler = [
    { op: "set", path: "/ok1", value: 1 },
    { op: "set", path: "/ok2", value: 2 },
    { op: "set", path: "/ok3", value: 3 },
  ];
  const cases = [
    { op: "set", path: "/id", value: "other" },
    { op: "remove", path: "/id" },
    { op: "set", path: "/pk", value: "q" },
    { op: "replace", path: "/pk", value: "q" },
    { op: "remove", path: "/pk" },
    { op: "incr", path: "/_ts", value: 1 },
    { op: "set", path: "/_etag", value: "\"x\"" },
    { op: "remove", path: "/_rid" },
    { op: "set", path: "/_self", value: "x" },
    { op: "move", from: "/s", path: "/id" },
    { op: "move", from: "/pk", path: "/pk2" },
  ];
  let base;
  for (const bad of cases) {
    for (const at of [1, 3]) {
      const ops = [...filler.slice(0, at), bad, ...filler.slice(at)];
      let msg;
      await rejects400(doc, ops, `${JSON.stringify(bad)} at index ${at}`);
      try {
        await container.item(doc.id, doc.pk).patch(ops);
      } catch (e) {
        msg = e.message;
      }
      const m = /Operation\s*\(?\s*(\d+)/i.exec(msg ?? "");
      assert.ok(m, `${JSON.stringify(bad)}: the message names the operation ("For Operation(i): ..."): ${msg}`);
      const offset = Number(m[1]) - at;
      base ??= offset;
      assert.ok(offset === 0 || offset === 1, `${JSON.stringify(bad)} at ${at}: message names operation ${m[1]}: ${msg}`);
      assert.equal(offset, base, `operation indexes are counted consistently (${base === 0 ? "0" : "1"}-based): ${msg}`);
    }
  }
});

test("a missing document is 404, also with a condition", async () => {
  await assert.rejects(container.item("never-there", "p").patch([{ op: "set", path: "/a", value: 1 }]), code(404));
  await assert.rejects(
    container.item("never-there", "p").patch({ condition: "FROM c WHERE true", operations: [{ op: "set", path: "/a", value: 1 }] }),
    code(404),
  );
  const { doc } = await fresh();
  await assert.rejects(container.item(doc.id, "other-pk").patch([{ op: "set", path: "/a", value: 1 }]), code(404), "same id, other partition key");
});

test("conditional patch: a true condition applies, a false one is 412 and applies nothing", async () => {
  const { doc } = await fresh();
  const ok = await container.item(doc.id, doc.pk).patch({
    condition: "FROM c WHERE c.status = 'Pending' AND c.cnt > 1",
    operations: [{ op: "set", path: "/status", value: "Paid" }],
  });
  assert.equal(ok.statusCode, 200);
  assert.equal(ok.resource.status, "Paid");
  const before = (await container.item(doc.id, doc.pk).read()).resource;
  await assert.rejects(
    container.item(doc.id, doc.pk).patch({ condition: "FROM c WHERE c.status = 'Pending'", operations: [{ op: "set", path: "/status", value: "Again" }] }),
    code(412),
  );
  // Undefined is not true either.
  await assert.rejects(
    container.item(doc.id, doc.pk).patch({ condition: "from doc where doc.nope = 1", operations: [{ op: "set", path: "/status", value: "Again" }] }),
    code(412),
  );
  assert.deepEqual((await container.item(doc.id, doc.pk).read()).resource, before, "a failed condition changes nothing");
  // Another alias, nested paths, functions and IN.
  const ok2 = await container.item(doc.id, doc.pk).patch({
    condition: "FROM o WHERE o.obj.inner.deep = true AND STARTSWITH(o.status, 'Pa') AND o.pk IN ('p', 'q') AND ARRAY_LENGTH(o.arr) = 3",
    operations: [{ op: "incr", path: "/cnt", value: 1 }],
  });
  assert.equal(ok2.resource.cnt, 6);
  // A condition that does not parse is 400, not 412.
  await assert.rejects(
    container.item(doc.id, doc.pk).patch({ condition: "FROM c WHERE c.status = ", operations: [{ op: "set", path: "/a", value: 9 }] }),
    code(400),
  );
});

test("If-Match: the current etag applies, a stale one is 412", async () => {
  const { doc, stored } = await fresh();
  const res = await container.item(doc.id, doc.pk).patch([{ op: "set", path: "/a", value: 2 }], { accessCondition: { type: "IfMatch", condition: stored._etag } });
  assert.equal(res.statusCode, 200);
  await assert.rejects(
    container.item(doc.id, doc.pk).patch([{ op: "set", path: "/a", value: 3 }], { accessCondition: { type: "IfMatch", condition: stored._etag } }),
    code(412),
  );
  assert.equal((await container.item(doc.id, doc.pk).read()).resource.a, 2);
});

test("the change feed shows the whole post-patch document once, with a new _lsn", async () => {
  const pk = uid("cf");
  const { doc } = await fresh({ pk });
  const it = container.items.getChangeFeedIterator({ changeFeedStartFrom: ChangeFeedStartFrom.Beginning(pk) });
  const { items: first } = await drainChangeFeed(it);
  assert.equal(first.length, 1);
  await container.item(doc.id, pk).patch([{ op: "set", path: "/s", value: "after" }, { op: "remove", path: "/gone" }]);
  // A failed patch adds nothing to the feed.
  await assert.rejects(container.item(doc.id, pk).patch([{ op: "remove", path: "/nope" }]), code(400));
  const { items } = await drainChangeFeed(it);
  assert.equal(items.length, 1, `one feed entry for the patch: ${JSON.stringify(items)}`);
  const want = { ...doc, s: "after" };
  delete want.gone;
  assert.deepEqual(userFields(items[0]), want, "the feed item is the full patched document");
  assert.ok(items[0]._lsn > first[0]._lsn, "the patch took a new LSN");
});
