// Taking IDs from leaf-nats in JavaScript, with the official nats.js client
// (npm install nats). IDs are 64-bit: they are BigInt here, never Number,
// which keeps only 53 bits exact (1862213154793730049 would become
// 1862213154793730000).
//
//   import { connect } from "nats";
//   import { nextN, Prefetcher } from "./leaf.mjs";
//   const nc = await connect({ servers: "nats://127.0.0.1:4222" });
//   const [id] = await nextN(nc, "leaf.snowflake");           // 1862213154793730049n
//   const ids = await nextN(nc, "leaf.segment.order", 1000, { binary: true });
//   const orders = new Prefetcher(nc, "leaf.segment.order");  // IDs from memory
//   const next = await orders.next();
//
// Run as a program (node leaf.mjs), it tries each of these against the
// vendor at NATS_URL and prints what it got as JSON.

import { connect, headers, Empty } from "nats";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// LeafError is an error reply: its code (400, 404, 500, 503) and the
// sentence the service sent. The service puts that sentence in the
// Nats-Service-Error header, and in the body too, so that a client that
// ignores headers cannot read an error as an ID: read the headers first.
export class LeafError extends Error {
  constructor(code, message) {
    super(`leaf-nats ${code}: ${message}`);
    this.code = code;
  }
}

// nextN asks subject for n IDs and returns them ascending, as BigInt. With
// binary, the reply is 8 big-endian bytes an ID (Leaf-Encoding: binary),
// which is smaller and faster than text for large batches.
export async function nextN(nc, subject, n = 1, { binary = false, timeout = 1000 } = {}) {
  const h = headers();
  if (binary) h.set("Leaf-Encoding", "binary");
  const body = n === 1 ? Empty : encoder.encode(String(n));
  const msg = await nc.request(subject, body, { timeout, headers: h });
  const code = msg.headers?.get("Nats-Service-Error-Code");
  if (code) throw new LeafError(Number(code), msg.headers.get("Nats-Service-Error"));
  if (binary) {
    const view = new DataView(msg.data.buffer, msg.data.byteOffset, msg.data.byteLength);
    const ids = [];
    for (let i = 0; i < view.byteLength; i += 8) ids.push(view.getBigUint64(i));
    return ids;
  }
  return decoder.decode(msg.data).split("\n").map((s) => BigInt(s));
}

// retryable errors may pass: the service is not ready (503), or no vendor
// answered in time.
function retryable(err) {
  return err instanceof LeafError ? err.code === 503 : ["503", "TIMEOUT"].includes(err?.code);
}

// Prefetcher hands out IDs from a local buffer and refills it in the
// background once it holds lowWater IDs or fewer, so next() rarely waits on
// the network. A refill that fails is retried after a short pause when the
// error may pass; its error reaches the caller only when the buffer is empty.
// IDs left in the buffer when the process exits are never handed out again.
export class Prefetcher {
  constructor(nc, subject, { size = 1000, lowWater = 250, binary = true } = {}) {
    Object.assign(this, { nc, subject, size, lowWater, binary });
    this.ids = [];
    this.pos = 0;
    this.refilling = null;
  }

  async next() {
    if (this.ids.length - this.pos <= this.lowWater) {
      this.#refill().catch(() => {}); // in the background; a failure shows when the buffer is empty
    }
    while (this.pos === this.ids.length) await this.#refill();
    return this.ids[this.pos++];
  }

  // close waits for a refill in flight, before the connection closes.
  async close() {
    await this.refilling?.catch(() => {});
  }

  #refill() {
    this.refilling ??= (async () => {
      try {
        for (let attempt = 0; ; attempt++) {
          try {
            const more = await nextN(this.nc, this.subject, this.size, { binary: this.binary });
            this.ids = this.ids.slice(this.pos).concat(more);
            this.pos = 0;
            return;
          } catch (err) {
            if (!retryable(err) || attempt === 3) throw err;
            await new Promise((r) => setTimeout(r, 50 * 2 ** attempt));
          }
        }
      } finally {
        this.refilling = null;
      }
    })();
    return this.refilling;
  }
}

// main tries each way against a vendor and prints what it got.
async function main() {
  const nc = await connect({ servers: process.env.NATS_URL ?? "nats://127.0.0.1:4222" });
  const tag = process.env.LEAF_TAG ?? "order";
  const out = {};
  out.snowflake = (await nextN(nc, "leaf.snowflake", 3)).map(String);
  out.binary = (await nextN(nc, "leaf.snowflake", 1000, { binary: true })).map(String);
  try {
    await nextN(nc, "leaf.snowflake", "abc");
  } catch (err) {
    out.badCount = { code: err.code, message: err.message };
  }
  try {
    await nextN(nc, "leaf.segment.no-such-tag");
  } catch (err) {
    out.unknownTag = { code: err.code, message: err.message };
  }
  const orders = new Prefetcher(nc, `leaf.segment.${tag}`, { size: 1000, lowWater: 250 });
  const seen = new Set();
  let previous = 0n, ascending = true;
  for (let i = 0; i < 10000; i++) {
    const id = await orders.next();
    seen.add(id);
    ascending &&= id > previous;
    previous = id;
  }
  await orders.close();
  out.prefetched = { ids: 10000, unique: seen.size, ascending, last: String(previous) };
  console.log(JSON.stringify(out));
  await nc.close();
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
