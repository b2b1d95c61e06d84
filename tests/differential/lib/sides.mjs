// The sides of a comparison: pi in-process (over InMemorySessionStorage or
// JsonlSessionStorage) and `sessiontree rpc` as a child process. Every side
// answers `call(method, params)` with `{ok: true, value}` or
// `{ok: false, error: {code, message}}`, values as plain JSON.

import {
  InMemorySessionStorage,
  JsonlSessionStorage,
  Session,
  SessionError,
  buildSessionContext,
  getEntriesToFork,
} from "@earendil-works/pi-agent-core";
import { NodeExecutionEnv } from "@earendil-works/pi-agent-core/node";
import { IdMap, toReal, RpcSide, runOnce } from "./rpc.mjs";

export { IdMap, toReal, RpcSide, runOnce };

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
