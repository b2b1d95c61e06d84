// The sides of a comparison: pi in-process (over InMemorySessionStorage or
// JsonlSessionStorage) and `sessiontree rpc` as a child process. Every side
// answers `call(method, params)` with `{ok: true, value}` or
// `{ok: false, error: {code, message}}`, values as plain JSON.

import { spawn } from "node:child_process";
import {
  InMemorySessionStorage,
  JsonlSessionStorage,
  Session,
  SessionError,
  buildSessionContext,
  getEntriesToFork,
} from "@earendil-works/pi-agent-core";
import { NodeExecutionEnv } from "@earendil-works/pi-agent-core/node";

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

function jsonClone(v) {
  return v === undefined ? null : JSON.parse(JSON.stringify(v));
}

export function piError(e) {
  // The Node binding throws pi's SessionError from its own copy of pi (its
  // package's dependency), another class object than this harness's.
  if (e instanceof SessionError || (e?.name === "SessionError" && typeof e.code === "string")) {
    return { code: e.code, message: e.message };
  }
  // Anything else is pi crashing (TypeError & co.): the generator should avoid it.
  return { code: `pi-crash:${e?.name ?? "Error"}`, message: String(e?.message ?? e) };
}

let fsEnv = null;
export function nodeFs() {
  if (!fsEnv) fsEnv = new NodeExecutionEnv({ cwd: process.cwd() });
  return fsEnv;
}

export class PiSide {
  /** @param kind "pi-jsonl" | "pi-memory" */
  constructor(kind, storage, path) {
    this.kind = kind;
    this.storage = storage;
    this.session = new Session(storage);
    this.path = path;
    this.ids = new IdMap();
  }

  static async openJsonl(path) {
    const storage = await JsonlSessionStorage.open(nodeFs(), path);
    return new PiSide("pi-jsonl", storage, path);
  }

  /** Drops the in-memory state and opens the file again (jsonl only; memory keeps its state). */
  async reopen() {
    if (this.kind !== "pi-jsonl") return;
    this.storage = await JsonlSessionStorage.open(nodeFs(), this.path);
    this.session = new Session(this.storage);
  }

  /**
   * pi's equivalent of "load the file into memory": its entries and metadata
   * in an InMemorySessionStorage. That constructor refuses a log whose leaf
   * is dangling; then the side answers every call with that error (as
   * `sessiontree rpc --backend memory` does).
   */
  static async openMemory(path, { tolerateFailure = false } = {}) {
    const loaded = await JsonlSessionStorage.open(nodeFs(), path);
    const entries = await loaded.getEntries();
    const metadata = await loaded.getMetadata();
    try {
      const storage = new InMemorySessionStorage({ entries, metadata: { ...metadata } });
      return new PiSide("pi-memory", storage, path);
    } catch (e) {
      if (!tolerateFailure) throw e;
      return new FailedSide("pi-memory", piError(e), path);
    }
  }

  /** The current leaf without validation (the generator's view). */
  rawLeaf() {
    return this.storage.currentLeafId !== undefined ? this.storage.currentLeafId : this.storage.leafId;
  }

  rawEntries() {
    return this.storage.entries;
  }

  async call(method, params) {
    try {
      const value = await this.dispatch(method, params);
      return { ok: true, value: jsonClone(value) };
    } catch (e) {
      return { ok: false, error: piError(e) };
    }
  }

  async dispatch(method, p) {
    const st = this.storage;
    const s = this.session;
    switch (method) {
      case "getMetadata":
        return st.getMetadata();
      case "getLeafId":
        return st.getLeafId();
      case "setLeafId":
        return st.setLeafId(p.leafId);
      case "createEntryId":
        return st.createEntryId();
      case "appendEntry":
        return st.appendEntry(p.entry);
      case "getEntry":
        return st.getEntry(p.id);
      case "findEntries":
        return st.findEntries(p.type);
      case "getLabel":
        return st.getLabel(p.id);
      case "getSessionName":
        return st.getSessionName();
      case "getSessionStats":
        return st.getSessionStats();
      case "getPathToRootOrCompaction":
        return st.getPathToRootOrCompaction(p.leafId);
      case "getEntries": {
        const o = {};
        if (p.afterEntrySeq !== undefined) o.afterEntrySeq = p.afterEntrySeq;
        if (p.limit !== undefined) o.limit = p.limit;
        return st.getEntries(o);
      }
      case "appendMessage":
        return s.appendMessage(p.message);
      case "appendThinkingLevelChange":
        return s.appendThinkingLevelChange(p.thinkingLevel);
      case "appendModelChange":
        return s.appendModelChange(p.provider, p.modelId);
      case "appendActiveToolsChange":
        return s.appendActiveToolsChange(p.activeToolNames);
      case "appendCompaction":
        return s.appendCompaction(
          p.summary,
          p.firstKeptEntryId,
          p.tokensBefore,
          p.details,
          p.fromHook,
          p.usage,
          p.retainedTail,
        );
      case "appendCustomEntry":
        return s.appendCustomEntry(p.customType, p.data);
      case "appendCustomMessageEntry":
        return s.appendCustomMessageEntry(p.customType, p.content, p.display, p.details);
      case "appendLabel":
        return s.appendLabel(p.targetId, p.label);
      case "appendSessionName":
        return s.appendSessionName(p.name);
      case "moveTo":
        return s.moveTo(p.entryId, p.summary);
      case "getBranch":
        return s.getBranch(p.fromId);
      case "buildContext":
        // pi's Session.buildContext() always starts at the leaf; with fromId
        // this is the same projection of getBranch(fromId).
        return buildSessionContext(await s.getBranch(p.fromId));
      case "getEntriesToFork": {
        const o = {};
        if (p.entryId !== undefined) o.entryId = p.entryId;
        if (p.position !== undefined) o.position = p.position;
        return getEntriesToFork(st, o);
      }
      default:
        throw new Error(`harness: unknown method ${method}`);
    }
  }

  async close() {}
}

/**
 * pi's own `Session` over the Node binding's `ArchiveStorage` (npm package
 * `sessiontree` in bindings/node): storage calls go to the binding, the
 * append helpers, moves and context are pi's code running on top of it.
 */
export class BindingSide extends PiSide {
  static async open(archive, kind, sessionId) {
    const side = new BindingSide(kind, await archive.storage(sessionId), null);
    side.archive = archive;
    side.sessionId = sessionId;
    return side;
  }

  /** Closes the storage (releasing the writer claim) and opens the session again. */
  async reopen() {
    await this.storage.close();
    this.storage = await this.archive.storage(this.sessionId);
    this.session = new Session(this.storage);
  }

  async close() {
    await this.storage.close();
  }
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

/** A side whose storage could not be opened: every call fails with that error. */
export class FailedSide {
  constructor(kind, error, path) {
    this.kind = kind;
    this.error = error;
    this.path = path;
    this.ids = new IdMap();
  }
  async call() {
    return { ok: false, error: this.error };
  }
  async close() {}
}
