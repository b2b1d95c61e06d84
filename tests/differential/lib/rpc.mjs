// Sides of a comparison that need no pi package: `sessiontree rpc` as a child
// process, one-shot runs of the binary, and the map between an implementation's
// generated ids and canonical names. Shared by the SDK harness (sides.mjs) and
// the app contract's harness (tests/app-differential).

import { spawn } from "node:child_process";

/** Real ids <-> canonical names ("#g1", "#g2", ... by order of first appearance). */
export class IdMap {
  constructor() {
    this.r2c = new Map();
    this.c2r = new Map();
    this.n = 0;
  }
  register(real) {
    if (typeof real !== "string") return real;
    const known = this.r2c.get(real);
    if (known !== undefined) return known;
    this.n += 1;
    const c = `#g${this.n}`;
    this.r2c.set(real, c);
    this.c2r.set(c, real);
    return c;
  }
  canon(real) {
    return typeof real === "string" ? (this.r2c.get(real) ?? real) : real;
  }
  real(canon) {
    return typeof canon === "string" ? (this.c2r.get(canon) ?? canon) : canon;
  }
}

/** Deep-translates canonical ids in request parameters to this side's real ids. */
export function toReal(ids, value) {
  if (typeof value === "string") return ids.real(value);
  if (Array.isArray(value)) return value.map((v) => toReal(ids, v));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = toReal(ids, v);
    return out;
  }
  return value;
}

/** `sessiontree ... rpc SOURCE` as a child process, one request in flight at a time. */
export class RpcSide {
  constructor(kind, bin, args, { path = null, timeoutMs = 20000 } = {}) {
    this.kind = kind;
    this.bin = bin;
    this.args = args;
    this.path = path;
    this.ids = new IdMap();
    this.timeoutMs = timeoutMs;
    this.start();
  }

  /** Ends the process and starts a new one on the same source (state comes from storage). */
  async reopen() {
    await this.close();
    this.start();
  }

  start() {
    const { bin, args } = this;
    this.nextId = 1;
    this.buffer = "";
    this.waiters = [];
    this.lines = [];
    this.stderr = "";
    this.exited = null;
    const child = spawn(bin, args, { stdio: ["pipe", "pipe", "pipe"] });
    this.child = child;
    this.child.stdout.setEncoding("utf8");
    this.child.stdout.on("data", (chunk) => this.onData(chunk));
    this.child.stderr.setEncoding("utf8");
    this.child.stderr.on("data", (chunk) => {
      if (this.stderr.length < 20000) this.stderr += chunk;
    });
    this.child.stdin.on("error", () => {});
    this.child.on("error", (e) => {
      if (this.child !== child) return;
      this.exited = `spawn error: ${e.message}`;
      this.flushWaiters(child);
    });
    this.child.on("exit", (code, signal) => {
      if (this.child !== child) return;
      this.exited = `exited with ${signal ?? code}`;
      this.flushWaiters(child);
    });
  }

  onData(chunk) {
    this.buffer += chunk;
    let i;
    while ((i = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, i);
      this.buffer = this.buffer.slice(i + 1);
      const w = this.waiters.shift();
      if (w) w.resolve(line);
      else this.lines.push(line);
    }
  }

  flushWaiters(child) {
    // Let pending stdout data arrive first; a process we replaced no longer matters.
    setImmediate(() => {
      if (this.child !== child) return;
      for (const w of this.waiters.splice(0)) w.reject(new Error(`sessiontree ${this.exited}; stderr: ${this.stderr.trim()}`));
    });
  }

  readLine() {
    if (this.lines.length) return Promise.resolve(this.lines.shift());
    if (this.exited) return Promise.reject(new Error(`sessiontree ${this.exited}; stderr: ${this.stderr.trim()}`));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`sessiontree: no answer within ${this.timeoutMs} ms (hang?)`));
      }, this.timeoutMs);
      this.waiters.push({
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
    });
  }

  async call(method, params) {
    const id = this.nextId++;
    const request = JSON.stringify({ id, method, params });
    try {
      this.child.stdin.write(`${request}\n`);
      const line = await this.readLine();
      let response;
      try {
        response = JSON.parse(line);
      } catch (e) {
        return { ok: false, error: { code: "harness:bad-json", message: `unparsable response line: ${line}` } };
      }
      if (response.id !== id) {
        return { ok: false, error: { code: "harness:bad-id", message: `response id ${response.id} for request ${id}` } };
      }
      if (response.ok === true) return { ok: true, value: response.value === undefined ? "<missing value>" : response.value };
      if (response.ok === false) return { ok: false, error: response.error };
      return { ok: false, error: { code: "harness:bad-response", message: line } };
    } catch (e) {
      return { ok: false, error: { code: "harness:transport", message: String(e.message ?? e) } };
    }
  }

  async close() {
    if (this.exited) return;
    const child = this.child;
    const done = new Promise((resolve) => child.once("exit", resolve));
    child.stdin.end();
    const t = setTimeout(() => child.kill("SIGKILL"), 5000);
    await done;
    clearTimeout(t);
  }
}

/** Runs `sessiontree ARGS` to completion. */
export function runOnce(bin, args, timeoutMs = 30000) {
  return new Promise((resolve) => {
    const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (c) => (out += c));
    child.stderr.on("data", (c) => (err += c));
    const t = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (e) => {
      clearTimeout(t);
      resolve({ status: -1, stdout: out, stderr: `${err}${e.message}` });
    });
    // "close", not "exit": only then has all of stdout been read.
    child.on("close", (code, signal) => {
      clearTimeout(t);
      resolve({ status: code ?? signal, stdout: out, stderr: err });
    });
  });
}
