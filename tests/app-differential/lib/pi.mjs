// pi-coding-agent 1.6.0 in-process: its own SessionManager (persisted, over a
// copy of the session file, or in memory over the file's entries), its own
// AgentSession.getSessionStats and getUsageCostBreakdown. Every side answers
// `call(method, params)` with `{ok: true, value}` or `{ok: false, error}`,
// values as the JSON the rpc would send (`undefined` -> `null`).

import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { IdMap } from "../../differential/lib/rpc.mjs";

/** Where pi 1.6 is installed (tests/pi16, `npm ci` there). */
export const PI16_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "pi16");
const PKG = join(PI16_DIR, "node_modules", "@earendil-works", "pi-coding-agent");

// pi's package exports only its index; the helpers below are imported by file
// (they are pi's own modules, the ones the index re-exports or AgentSession uses).
const piIndex = await import(pathToFileURL(join(PKG, "dist", "index.js")).href);
const piSessionManager = await import(pathToFileURL(join(PKG, "dist", "core", "session-manager.js")).href);
const piUsageTotals = await import(pathToFileURL(join(PKG, "dist", "core", "usage-totals.js")).href);

export const PI_VERSION = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8")).version;
const { SessionManager, AgentSession } = piIndex;
const { loadEntriesFromFile } = piSessionManager;
const { getUsageCostBreakdown } = piUsageTotals;

export function jsonClone(v) {
  return v === undefined ? null : JSON.parse(JSON.stringify(v));
}

/**
 * What pi threw. An `Error` pi throws on purpose (`Entry X not found`, ...)
 * keeps its message; anything else (TypeError & co.) is pi crashing on input
 * it does not check: the rpc must fail too, its message is not compared.
 */
export function piError(e) {
  if (e && e.constructor === Error) return { code: "pi-error", message: e.message };
  return { code: `pi-crash:${e?.name ?? "Error"}`, message: String(e?.message ?? e) };
}

/**
 * `AgentSession.getSessionStats` is pi's own method, run with `this` being the
 * few members it reads (the session manager, `sessionFile`, `sessionId`,
 * `getContextUsage`); `contextUsage` needs a model and is not part of the
 * contract (the rpc answers without it), so it is dropped.
 */
function sessionStats(sm) {
  const self = {
    sessionManager: sm,
    get sessionFile() {
      return sm.getSessionFile();
    },
    get sessionId() {
      return sm.getSessionId();
    },
    getContextUsage() {
      return undefined;
    },
  };
  const { contextUsage, ...stats } = AgentSession.prototype.getSessionStats.call(self);
  return stats;
}

function headerCwd(entries) {
  const cwd = entries.find((e) => e?.type === "session")?.cwd;
  return typeof cwd === "string" && cwd !== "" ? cwd : undefined;
}

export class PiAppSide {
  /**
   * @param kind  "pi-jsonl" (SessionManager.open over `path`) or "pi-memory"
   *              (SessionManager.inMemory over the entries of `path`)
   */
  constructor(kind, path, { cwd = "/work/appdiff" } = {}) {
    this.kind = kind;
    this.persisted = kind === "pi-jsonl";
    this.path = this.persisted ? resolve(path) : null;
    this.sourcePath = path;
    this.cwd = cwd;
    this.ids = new IdMap();
    this.open();
  }

  open() {
    if (this.persisted) {
      this.sm = SessionManager.open(this.path);
    } else {
      // loadEntriesFromFile repairs a missing final newline: read a file pi may write.
      // The caller of inMemory passes the cwd: the header's, as a caller holding the file would.
      const entries = loadEntriesFromFile(this.sourcePath);
      this.sm = SessionManager.inMemory(headerCwd(entries) ?? this.cwd, undefined, entries);
    }
  }

  /** pi restarting: the persisted manager opens its file again; the in-memory one is rebuilt from its own entries. */
  async reopen() {
    if (this.persisted) {
      this.open();
    } else {
      const header = this.sm.getHeader();
      const entries = JSON.parse(JSON.stringify([...(header ? [header] : []), ...this.sm.getEntries()]));
      this.sm = SessionManager.inMemory(headerCwd(entries) ?? this.cwd, undefined, entries);
    }
  }

  /** The generator's view: entries, leaf, branch. */
  state() {
    return { entries: this.sm.getEntries(), leafId: this.sm.getLeafId(), branch: this.sm.getBranch() };
  }

  async call(method, params) {
    try {
      return { ok: true, value: jsonClone(this.dispatch(method, params ?? {})) };
    } catch (e) {
      return { ok: false, error: piError(e) };
    }
  }

  dispatch(method, p) {
    const sm = this.sm;
    switch (method) {
      case "getLeafId":
        return sm.getLeafId();
      case "getLeafEntry":
        return sm.getLeafEntry();
      case "getEntry":
        return sm.getEntry(p.id);
      case "getEntries":
        return sm.getEntries();
      case "getEntryCount":
        return sm.getEntryCount();
      case "getBranch":
        return sm.getBranch(p.fromId);
      case "getTree":
        return sm.getTree();
      case "getLabel":
        return sm.getLabel(p.id);
      case "getSessionName":
        return sm.getSessionName();
      case "getHeader":
        return sm.getHeader();
      case "getSessionId":
        return sm.getSessionId();
      case "getCwd":
        return sm.getCwd();
      case "getSessionFile":
        return sm.getSessionFile();
      case "getChildren":
        return sm.getChildren(p.parentId);
      case "buildSessionContext":
        return sm.buildSessionContext();
      case "buildContextEntries":
        return sm.buildContextEntries();
      case "buildSessionProjection":
        return sm.buildSessionProjection();
      case "appendMessage":
        return sm.appendMessage(p.message);
      case "appendThinkingLevelChange":
        return sm.appendThinkingLevelChange(p.thinkingLevel);
      case "appendModelChange":
        return sm.appendModelChange(p.provider, p.modelId);
      case "appendUsage":
        return sm.appendUsage(p.kind, p.provider, p.model, p.usage, p.note);
      case "appendCompaction":
        return sm.appendCompaction(p.summary, p.firstKeptEntryId, p.tokensBefore, p.details, p.fromHook, p.usage);
      case "appendCustomEntry":
        return sm.appendCustomEntry(p.customType, p.data);
      case "appendSessionInfo":
        return sm.appendSessionInfo(p.name);
      case "appendCustomMessageEntry":
        return sm.appendCustomMessageEntry(p.customType, p.content, p.display, p.details);
      case "appendContextEdit":
        return sm.appendContextEdit(p.targetId, p.replacement);
      case "appendLabelChange":
        return sm.appendLabelChange(p.targetId, p.label);
      case "branch":
        return sm.branch(p.branchFromId);
      case "resetLeaf":
        return sm.resetLeaf();
      case "branchWithSummary":
        return sm.branchWithSummary(p.branchFromId, p.summary, p.details, p.fromHook, p.usage);
      case "getSessionStats":
        return sessionStats(sm);
      case "getUsageCostBreakdown":
        return getUsageCostBreakdown(sm.getEntries());
      default:
        throw new TypeError(`harness: unknown method ${method}`);
    }
  }

  async close() {}
}
