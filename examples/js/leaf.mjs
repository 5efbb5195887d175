// Taking IDs from leaf-nats in JavaScript, with the official nats.js client,
// version 3 (npm install @nats-io/transport-node @nats-io/nats-core). IDs
// are 64-bit: they are BigInt here, never Number, which keeps only 53 bits
// exact (1862213154793730049 would become 1862213154793730000). A vendor
// run with LEAF_SNOWFLAKE_LAYOUT=js53 makes snowflake IDs below 2^53, which
// a Number holds exactly: ask with { numbers: true } (snowflakeLayout tells
// which layout the vendors run).
//
//   import { connect } from "@nats-io/transport-node";
//   import { nextN, Prefetcher, snowflakeLayout } from "./leaf.mjs";
//   const nc = await connect({ servers: "nats://127.0.0.1:4222" });
//   const [id] = await nextN(nc, "leaf.snowflake");           // 1862213154793730049n
//   const numbers = (await snowflakeLayout(nc)) === "js53";   // js53: IDs below 2^53
//   const [small] = await nextN(nc, "leaf.snowflake", 1, { numbers }); // 1946275943805701
//   const ids = await nextN(nc, "leaf.segment.order", 1000, { binary: true });
//   const orders = new Prefetcher(nc, "leaf.segment.order");  // IDs from memory
//   const next = await orders.next();
//
// Run as a program (node leaf.mjs), it tries each of these against the
// vendor at NATS_URL and prints what it got; with --json, as one JSON
// object.

import { connect } from "@nats-io/transport-node";
import { Empty, errors, headers } from "@nats-io/nats-core";

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
// which is smaller and faster than text for large batches. With numbers,
// the IDs are Numbers: for the snowflake IDs of a js53 vendor, all below
// 2^53; an ID a Number cannot hold exactly is an error, never rounded.
export async function nextN(nc, subject, n = 1, { binary = false, numbers = false, timeout = 1000 } = {}) {
  const h = headers();
  if (binary) h.set("Leaf-Encoding", "binary");
  const body = n === 1 ? Empty : encoder.encode(String(n));
  const msg = await nc.request(subject, body, { timeout, headers: h });
  const code = msg.headers?.get("Nats-Service-Error-Code");
  if (code) throw new LeafError(Number(code), msg.headers.get("Nats-Service-Error"));
  const ids = [];
  if (binary) {
    const view = new DataView(msg.data.buffer, msg.data.byteOffset, msg.data.byteLength);
    for (let i = 0; i < view.byteLength; i += 8) ids.push(view.getBigUint64(i));
  } else {
    for (const s of decoder.decode(msg.data).split("\n")) ids.push(BigInt(s));
  }
  return numbers ? ids.map(toNumber) : ids;
}

// toNumber turns an ID into a Number, refusing one that would lose digits.
function toNumber(id) {
  if (id > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new RangeError(`ID ${id} is above 2^53-1: a Number would lose its last digits (run the vendors with LEAF_SNOWFLAKE_LAYOUT=js53, or keep BigInt)`);
  }
  return Number(id);
}

// snowflakeLayout asks a vendor ($SRV.INFO.leaf, what `nats micro info leaf`
// shows) for its snowflake layout: "js53" (IDs below 2^53) or "default".
// A vendor that predates layouts says nothing: its IDs are the default's.
export async function snowflakeLayout(nc, { timeout = 1000 } = {}) {
  const msg = await nc.request("$SRV.INFO.leaf", Empty, { timeout });
  const info = JSON.parse(decoder.decode(msg.data));
  return info.metadata?.snowflake_layout ?? "default";
}

// retryable errors may pass: the service is not ready (503) or asked too
// fast (429), no vendor answered in time, or none is subscribed right now
// (one restarting).
function retryable(err) {
  if (err instanceof LeafError) return err.code === 503 || err.code === 429;
  return err instanceof errors.TimeoutError || (err instanceof errors.RequestError && err.isNoResponders());
}

// Prefetcher hands out IDs from a local buffer and refills it in the
// background once it holds lowWater IDs or fewer, so next() rarely waits on
// the network. A refill that fails is retried after a short pause when the
// error may pass; its error reaches the caller only when the buffer is empty.
// IDs left in the buffer when the process exits are never handed out again.
export class Prefetcher {
  constructor(nc, subject, { size = 1000, lowWater = 250, binary = true, numbers = false } = {}) {
    Object.assign(this, { nc, subject, size, lowWater, binary, numbers });
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
            const more = await nextN(this.nc, this.subject, this.size, { binary: this.binary, numbers: this.numbers });
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
  // js53 IDs are plain Numbers (JSON numbers with --json); the default
  // layout's stay BigInt (JSON strings, since JSON numbers are float64 to
  // most readers).
  out.layout = await snowflakeLayout(nc);
  const numbers = out.layout === "js53";
  const asJSON = (ids) => (numbers ? ids : ids.map(String));
  const three = await nextN(nc, "leaf.snowflake", 3, { numbers });
  out.type = typeof three[0];
  out.snowflake = asJSON(three);
  out.binary = asJSON(await nextN(nc, "leaf.snowflake", 1000, { binary: true, numbers }));
  out.badCount = await failure(nextN(nc, "leaf.snowflake", "abc"));
  out.unknownTag = await failure(nextN(nc, "leaf.segment.no-such-tag"));
  const orders = new Prefetcher(nc, `leaf.segment.${tag}`, { size: 1000, lowWater: 250 });
  // Each vendor hands out its own segments of a tag, so with several
  // vendors the IDs go up within each vendor's segment, and drop where the
  // next refill came from another vendor: count the ascending runs.
  const seen = new Set();
  let first = 0n, previous = 0n, runs = 1;
  for (let i = 0; i < 10000; i++) {
    const id = await orders.next();
    seen.add(id);
    if (i > 0 && id <= previous) runs++;
    first ||= id;
    previous = id;
  }
  await orders.close();
  out.prefetched = { ids: 10000, unique: seen.size, ascending: runs === 1, runs, first: String(first), last: String(previous) };
  await nc.close();
  if (process.argv.includes("--json")) {
    console.log(JSON.stringify(out));
    return;
  }
  const b = out.binary, p = out.prefetched;
  console.log(`3 snowflake IDs (${out.layout}, ${out.type}): ${out.snowflake.join(", ")}`);
  console.log(`1000 in binary:                ${b[0]} .. ${b[b.length - 1]}`);
  console.log(`a bad count:                   ${out.badCount.message}`);
  console.log(`an unknown tag:                ${out.unknownTag.message}`);
  console.log(`10000 of tag ${tag} prefetched: ${p.first} .. ${p.last}, ${p.unique} unique, ${orderNote(p.runs)}`);
}

// orderNote says how prefetched segment IDs were ordered: one ascending
// run (one vendor, or vendors whose segments followed each other), or
// several, which is what a normal tag served by several vendors gives (a
// strict tag's IDs ascend across the cluster).
export function orderNote(runs) {
  return runs === 1 ? "ascending" : `per-vendor segments, ascending within each (${runs} runs)`;
}

// failure is the LeafError a request that should fail ends with.
async function failure(request) {
  try {
    await request;
  } catch (err) {
    if (err instanceof LeafError) return { code: err.code, message: err.message };
    throw err;
  }
  throw new Error("the request succeeded");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
