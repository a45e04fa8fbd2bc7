// Triggers that run (docs/azure-scripts.md), refereed by the official SDK:
// preTriggerInclude / postTriggerInclude on item writes.
import assert from "node:assert/strict";
import { test } from "node:test";

import { TriggerOperation, TriggerType } from "@azure/cosmos";

import { httpCode as code, newContainer, useDatabase } from "./harness.mjs";

let database;
useDatabase((e) => ({ database } = e));

const STAMP = `function stamp() {
  var req = getContext().getRequest(), doc = req.getBody();
  if (doc.bad) throw new Error('refused by stamp');
  doc.stamped = (doc.stamped || 0) + 1;
  req.setBody(doc);
}`;

const AUDIT = `function audit() {
  var c = getContext().getCollection(), doc = getContext().getResponse().getBody();
  if (doc.failAudit) throw new Error('audit says no');
  if (!c.createDocument(c.getSelfLink(), { id: 'audit-' + doc.id, pk: doc.pk, of: doc.id, etag: doc._etag }))
    throw new Error('audit not accepted');
}`;

async function withTriggers() {
  const { container } = await newContainer(database);
  await container.scripts.triggers.create({ id: "stamp", body: STAMP, triggerType: TriggerType.Pre, triggerOperation: TriggerOperation.All });
  await container.scripts.triggers.create({ id: "audit", body: AUDIT, triggerType: TriggerType.Post, triggerOperation: TriggerOperation.All });
  await container.scripts.triggers.create({ id: "onDelete", body: "function () { if (getContext().getRequest().getBody() !== undefined) throw new Error('a delete has no body'); }", triggerType: TriggerType.Pre, triggerOperation: TriggerOperation.Delete });
  return container;
}

test("a pre-trigger runs only when the write names it, and can change the document", async () => {
  const container = await withTriggers();
  const plain = await container.items.create({ id: "plain", pk: "p" });
  assert.equal(plain.resource.stamped, undefined, "no header, no trigger");
  const made = await container.items.create({ id: "a", pk: "p" }, { preTriggerInclude: ["stamp"] });
  assert.equal(made.statusCode, 201);
  assert.equal(made.resource.stamped, 1, "the answer is the changed document");
  assert.equal((await container.item("a", "p").read()).resource.stamped, 1, "and so is the stored one");
  assert.equal(made.etag, made.resource._etag, "with its real etag");
  const replaced = await container.item("a", "p").replace({ id: "a", pk: "p", stamped: 5 }, { preTriggerInclude: ["stamp"] });
  assert.equal(replaced.resource.stamped, 6);
  const upserted = await container.items.upsert({ id: "u", pk: "p" }, { preTriggerInclude: ["stamp"] });
  assert.equal(upserted.statusCode, 201);
  assert.equal(upserted.resource.stamped, 1);
});

test("a pre-trigger's throw refuses the write with its message", async () => {
  const container = await withTriggers();
  await assert.rejects(container.items.create({ id: "b", pk: "p", bad: true }, { preTriggerInclude: ["stamp"] }), (e) => {
    code(400)(e);
    assert.match(e.message, /refused by stamp/);
    return true;
  });
  assert.equal((await container.item("b", "p").read()).statusCode, 404);
});

test("a post-trigger writes in the same transaction, and its throw rolls the write back", async () => {
  const container = await withTriggers();
  await container.items.create({ id: "c", pk: "p" }, { postTriggerInclude: ["audit"] });
  const audit = (await container.item("audit-c", "p").read()).resource;
  assert.equal(audit.of, "c", "the post-trigger saw the written document");
  await assert.rejects(container.items.create({ id: "d", pk: "p", failAudit: true }, { postTriggerInclude: ["audit"] }), code(400));
  assert.equal((await container.item("d", "p").read()).statusCode, 404, "the write was rolled back");
  assert.equal((await container.item("audit-d", "p").read()).statusCode, 404);
  // Both kinds on one write.
  const both = await container.items.create({ id: "e", pk: "p" }, { preTriggerInclude: ["stamp"], postTriggerInclude: ["audit"] });
  assert.equal(both.resource.stamped, 1);
  assert.equal((await container.item("audit-e", "p").read()).statusCode, 200);
});

test("a named trigger must exist, be of the named type and cover the operation", async () => {
  const container = await withTriggers();
  await assert.rejects(container.items.create({ id: "f", pk: "p" }, { preTriggerInclude: ["missing"] }), code(404));
  await assert.rejects(container.items.create({ id: "f", pk: "p" }, { preTriggerInclude: ["audit"] }), code(400));
  await assert.rejects(container.items.create({ id: "f", pk: "p" }, { preTriggerInclude: ["onDelete"] }), code(400));
  assert.equal((await container.item("f", "p").read()).statusCode, 404);
  await container.items.create({ id: "g", pk: "p" });
  const del = await container.item("g", "p").delete({ preTriggerInclude: ["onDelete"] });
  assert.equal(del.statusCode, 204);
  assert.equal((await container.item("g", "p").read()).statusCode, 404);
});
