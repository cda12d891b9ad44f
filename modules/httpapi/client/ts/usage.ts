// Type-checked by make ts-check (.ci/openapi-ts.sh), never run: the
// broker's API called through openapi-fetch with the types openapi-typescript
// generates from modules/httpapi/openapi.yaml (mmmq.ts, beside this file
// when checked). A request or answer the document does not allow is a type
// error; each @ts-expect-error line must be one, or the check fails.
import createClient from "openapi-fetch";
import type { components, paths } from "./mmmq";

type Schemas = components["schemas"];

const mmmq = createClient<paths>({ baseUrl: "http://localhost:8080" });

// Publish, batch and read back; the answer's fields are typed.
export async function publishAndReadBack(): Promise<number> {
  const msg: Schemas["PublishRequest"] = {
    topic: "order.created",
    content: { orderId: 42 },
    headers: { k: "v" },
    id: "evt-1",
    key: "customer-7",
    ttl: "1h",
  };
  const one = await mmmq.POST("/messages", { params: { query: { ack: "durable" } }, body: msg });
  if (one.error) throw new Error(`${one.error.code}: ${one.error.error}`);
  const level: Schemas["AckLevel"] = one.data.level;
  const offset: number | undefined = one.data.offset;

  const batch = await mmmq.POST("/messages/batch", {
    body: [msg, { topic: { name: "payment.done" }, content: null, deliverAt: 1796378400000 }],
  });
  if (batch.data) {
    for (const r of batch.data.results) console.log(r.offset ?? r.scheduleId, r.duplicate === true);
  }

  const page = await mmmq.GET("/topics/{topic}/messages", {
    params: { path: { topic: "order.created" }, query: { offset: 0, limit: 10 } },
  });
  if (page.error) throw new Error(page.error.error);
  for (const e of page.data.messages) {
    const m = e.message;
    if (m !== null && typeof m === "object" && !Array.isArray(m)) console.log(e.offset, m.id, m.key, m.content);
  }
  console.log(level, offset);
  return page.data.nextOffset;
}

// A consumer group: fetch with a session, then ack through the last offset.
export async function consume(): Promise<void> {
  const path = { topic: "order.created", group: "billing" };
  const got = await mmmq.POST("/topics/{topic}/groups/{group}/fetch", { params: { path, query: { max: 100, wait: 5000 } } });
  if (got.error) throw new Error(got.error.code);
  const last = got.data.messages.at(-1);
  if (last === undefined) return;
  const acked = await mmmq.POST("/topics/{topic}/groups/{group}/ack", {
    params: { path, header: { "mmmq-session": got.data.session } },
    body: { offset: last.offset },
  });
  console.log(acked.data?.committed);
}

// A dispatcher: create, pause, seek back to the start, redrive its dead letters.
export async function dispatch(): Promise<void> {
  const created = await mmmq.POST("/mmmq/dispatchers", {
    body: { name: "billing", host: "http://localhost:8081", patterns: ["order.**"], "ack-mode": "status" },
  });
  if (created.error) throw new Error(created.error.error);
  const name = { path: { name: created.data.name } };
  await mmmq.POST("/mmmq/dispatchers/{name}/pause", { params: name });
  const sought = await mmmq.POST("/mmmq/dispatchers/{name}/seek", { params: name, body: { to: "earliest" } });
  for (const t of sought.data?.topics ?? []) console.log(t.topic, t.previous, "->", t.offset);
  const redriven = await mmmq.POST("/mmmq/dispatchers/{name}/redrive", { params: name, body: { from: 0 } });
  console.log(redriven.data?.redriven.length, redriven.data?.next);
}

// What the document refuses does not type-check.
export async function refused(): Promise<void> {
  // @ts-expect-error: an ack level is accepted, written or durable.
  await mmmq.POST("/messages", { params: { query: { ack: "sometimes" } }, body: { topic: "t", content: 1 } });
  // @ts-expect-error: content is required (null is a value, absent is not).
  await mmmq.POST("/messages", { body: { topic: "t" } });
  // @ts-expect-error: an ack needs the session header.
  await mmmq.POST("/topics/{topic}/groups/{group}/ack", { params: { path: { topic: "t", group: "g" } }, body: { offset: 1 } });
  // @ts-expect-error: a dispatcher needs patterns.
  await mmmq.POST("/mmmq/dispatchers", { body: { name: "x", host: "http://h:1" } });
  // @ts-expect-error: no such path.
  await mmmq.GET("/topics/{topic}/nowhere", { params: { path: { topic: "t" } } });
}
