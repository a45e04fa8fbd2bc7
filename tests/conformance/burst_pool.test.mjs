// Issue 29 on the thread pool: the same burst as burst.test.mjs with
// --threads 8 (each worker polls many connections; libmicrohttpd splits the
// connection limit between them).
import { test } from "node:test";

import { BURST, burstClient, burstContainer, upsertAndReadBurst } from "./burst.mjs";
import { startCosmolite } from "./harness.mjs";

test(`${BURST} concurrent upserts and point reads from one SDK client all succeed with --threads 8`, async (t) => {
  const srv = await startCosmolite(t, { args: ["--threads", "8"] });
  const container = await burstContainer(burstClient(srv));
  await upsertAndReadBurst(srv, container);
});
