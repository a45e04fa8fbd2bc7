// Issue 29: 2,000 concurrent upserts and 2,000 concurrent point reads from one
// SDK client, at cosmolite's default settings (one thread per connection).
// Before the fix the connection guard hung up on requests it had not read
// yet: "socket hang up" / ECONNRESET, and only 896 documents were written.
import { test } from "node:test";

import { BURST, burstClient, burstContainer, upsertAndReadBurst } from "./burst.mjs";
import { startCosmolite } from "./harness.mjs";

test(`${BURST} concurrent upserts and point reads from one SDK client all succeed at the defaults`, async (t) => {
  const srv = await startCosmolite(t);
  const container = await burstContainer(burstClient(srv));
  await upsertAndReadBurst(srv, container);
});
