// sessiontree for Node: pi's SessionStorage and SessionRepo over sessiontree's
// SQLite archive, and its JSONL backend, in process. Every call runs in the
// Rust engine off the JS thread; sessions answer through the same dispatch
// as `sessiontree rpc`, so the binding and the rpc give the same answers.
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const native = require("./sessiontree.node");

// pi's own classes when pi is installed (an optional peer dependency), so
// that errors are pi's `SessionError` (pi's harness tests `instanceof`) and
// the repository hands out pi's `Session`. Those are pi-agent-core 0.83's SDK
// classes: agent-core 1.x (pi 1.x) ships only the agent loop, so with it
// installed `pi.Session` is absent and only `sessionManager()` is for it.
let pi = null;
try {
  pi = await import("@earendil-works/pi-agent-core");
} catch {
  pi = null;
}

/** The version of an installed package, as the importer resolves it (undefined if none). */
function installedVersion(name) {
  let file;
  try {
    file = fileURLToPath(import.meta.resolve(name));
  } catch {
    return undefined;
  }
  for (let dir = dirname(file); dir !== dirname(dir); dir = dirname(dir)) {
    const manifest = join(dir, "package.json");
    if (!existsSync(manifest)) continue;
    try {
      const pkg = JSON.parse(readFileSync(manifest, "utf8"));
      if (pkg.name === name) return pkg.version;
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/**
 * What the installed pi-agent-core is, for errors naming the pi an API needs:
 * "not installed", or its version and what it lacks.
 */
function installedAgentCore() {
  const version = installedVersion("@earendil-works/pi-agent-core");
  if (version === undefined) return "@earendil-works/pi-agent-core is not installed";
  if (pi === null) return `the installed @earendil-works/pi-agent-core ${version} could not be loaded`;
  const pi1 = Number(version.split(".")[0]) >= 1;
  return pi1
    ? `the installed @earendil-works/pi-agent-core ${version} has no Session (pi 1.x's agent-core ships only the agent loop; pi 1.x runs on archive.sessionManager(id): createAgentSession({ sessionManager }) of @earendil-works/pi-coding-agent)`
    : `the installed @earendil-works/pi-agent-core ${version} has no Session`;
}

/** pi's error shape: `code` (the contract's codes) and `message`. */
class FallbackSessionError extends Error {
  constructor(code, message, cause) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "SessionError";
    this.code = code;
  }
}

/** The error class thrown: pi's `SessionError` where pi is installed. */
export const SessionError = pi?.SessionError ?? FallbackSessionError;

/** An engine rejection (its message is `{code, message}` as JSON) as a SessionError. */
function toSessionError(e) {
  let parsed = null;
  try {
    parsed = JSON.parse(e?.message);
  } catch {
    parsed = null;
  }
  if (parsed && typeof parsed.code === "string" && typeof parsed.message === "string") {
    return new SessionError(parsed.code, parsed.message);
  }
  return e;
}

async function engine(promise) {
  try {
    return await promise;
  } catch (e) {
    throw toSessionError(e);
  }
}

function optionsJson(options) {
  return JSON.stringify(options ?? {});
}

const undefinedIfNull = (v) => (v === null ? undefined : v);

/**
 * One session as pi's `SessionStorage`. Calls run one at a time, in the
 * order they were made (as pi's storages do), each off the JS thread.
 */
class NativeSessionStorage {
  #native;
  #queue = Promise.resolve();

  constructor(handle) {
    this.#native = handle;
  }

  /** The session id. */
  get sessionId() {
    return this.#native.id;
  }

  #call(method, params) {
    const text = JSON.stringify(params ?? {});
    const answer = this.#queue.then(() => this.#native.call(method, text));
    this.#queue = answer.then(
      () => undefined,
      () => undefined,
    );
    return answer.then(
      (json) => JSON.parse(json),
      (e) => {
        throw toSessionError(e);
      },
    );
  }

  getMetadata() {
    return this.#call("getMetadata");
  }
  getLeafId() {
    return this.#call("getLeafId");
  }
  async setLeafId(leafId) {
    await this.#call("setLeafId", { leafId });
  }
  createEntryId() {
    return this.#call("createEntryId");
  }
  async appendEntry(entry) {
    await this.#call("appendEntry", { entry });
  }
  async getEntry(id) {
    return undefinedIfNull(await this.#call("getEntry", { id }));
  }
  findEntries(type) {
    return this.#call("findEntries", { type });
  }
  async getLabel(id) {
    return undefinedIfNull(await this.#call("getLabel", { id }));
  }
  async getSessionName() {
    return undefinedIfNull(await this.#call("getSessionName"));
  }
  getSessionStats() {
    return this.#call("getSessionStats");
  }
  getPathToRootOrCompaction(leafId) {
    return this.#call("getPathToRootOrCompaction", { leafId });
  }
  getEntries(options) {
    return this.#call("getEntries", options ?? {});
  }

  /**
   * Any method `sessiontree rpc` serves (pi's names, e.g. `buildContext`),
   * answered in process: the value as parsed JSON.
   */
  request(method, params) {
    return this.#call(method, params);
  }

  /** Waits for the calls in flight, then closes: the writer claim, if taken, is released. */
  async close() {
    const pending = this.#queue;
    this.#queue = pending.then(() => engine(this.#native.close()));
    await this.#queue;
  }
}

/** pi's `SessionStorage` over one session of an archive. */
export class ArchiveStorage extends NativeSessionStorage {}

/** pi's `SessionStorage` over a pi JSONL file, served by the Rust JSONL backend. */
export class JsonlStorage extends NativeSessionStorage {
  /** Opens an existing session file. */
  static async open(path, { durability } = {}) {
    return new JsonlStorage(await engine(native.openJsonl(path, durability)));
  }
}

function sessionClassOf(options) {
  const Session = options?.Session ?? pi?.Session;
  if (typeof Session !== "function") {
    throw new SessionError(
      "unknown",
      `archive.repo() needs the Session class of pi's SDK, @earendil-works/pi-agent-core 0.83 (install @earendil-works/pi-agent-core@0.83.0 or pass { Session }); ${installedAgentCore()}`,
    );
  }
  return Session;
}

/** pi's `SessionRepo` over an archive: sessions are pi `Session`s over `ArchiveStorage`. */
export class ArchiveRepo {
  #archive;
  #Session;

  constructor(archive, Session) {
    this.#archive = archive;
    this.#Session = Session;
  }

  /** Creates an empty session (`cwd` required; `id`, `parentSessionPath`, `metadata` optional). */
  async create(options) {
    const meta = JSON.parse(await engine(this.#archive.native.createSession(optionsJson(options))));
    return new this.#Session(await this.#archive.storage(meta.id));
  }

  /** Opens a listed session (`not_found` if it is gone). */
  async open(metadata) {
    return new this.#Session(await this.#archive.storage(metadata.id));
  }

  /** Sessions newest first; only those of `cwd` when given; paged by `limit` and `offset`. */
  async list(options) {
    return JSON.parse(await engine(this.#archive.native.list(optionsJson(options))));
  }

  /** Deletes a session and everything in it. */
  async delete(metadata) {
    await engine(this.#archive.native.deleteSession(metadata.id));
  }

  /** Copies (part of) a session into a new one, keeping entry ids (pi's `fork`). */
  async fork(source, options) {
    const meta = JSON.parse(await engine(this.#archive.native.fork(source.id, optionsJson(options))));
    return new this.#Session(await this.#archive.storage(meta.id));
  }
}

/** An error of a SessionManager call: pi's plain `Error` (its message), with the engine's `code`. */
function managerError(e) {
  let parsed = null;
  try {
    parsed = JSON.parse(e?.message);
  } catch {
    parsed = null;
  }
  if (!parsed || typeof parsed.message !== "string") return e;
  const error = new Error(parsed.message);
  error.code = parsed.code;
  return error;
}

/** Runs a synchronous addon call, its error as a SessionManager error. */
function sync(f) {
  try {
    return f();
  } catch (e) {
    throw managerError(e);
  }
}

/** A refusal naming the SessionManager method the archive cannot honour. */
function cannot(method, why) {
  const error = new Error(`SessionManager.${method}: ${why}`);
  error.code = "usage";
  return error;
}

/** pi's rule for a session id given to `newSession({ id })` (ids name files in pi's layout). */
function checkSessionId(id) {
  if (typeof id !== "string" || !/^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$/.test(id)) {
    throw new Error(
      `Session id must be non-empty, contain only alphanumeric characters, '-', '_', and '.', and start and end with an alphanumeric character (got ${JSON.stringify(id)})`,
    );
  }
}

/** A fresh 8-hex entry id that `taken` does not hold (pi's entry ids). */
function freshEntryId(taken) {
  for (;;) {
    const id = randomUUID().slice(0, 8);
    if (!taken.has(id)) return id;
  }
}

/**
 * pi 1.6's `SessionManager` (pi-coding-agent, the pi app's session rules)
 * over one archive session: every public method, synchronous as pi's, each
 * answered in process by the dispatch `sessiontree rpc --contract app`
 * serves. `createAgentSession({ sessionManager })` runs on it. Entries are
 * written to the archive as they are appended; `branch`/`resetLeaf` move
 * the leaf in this object only, as in pi. There is no JSONL file:
 * `isPersisted()` is false and `getSessionFile()` undefined, as for pi's
 * in-memory manager, and `newSession`/`createBranchedSession` start a new
 * archive session (this object then answers for it).
 */
export class ArchiveSessionManager {
  #archive;
  #native;
  #cwd;

  constructor(archive, handle) {
    this.#archive = archive;
    this.#adopt(handle);
  }

  #adopt(handle) {
    this.#native = handle;
    const header = this.#call("getHeader");
    this.#cwd = header?.cwd || process.cwd();
  }

  /** Makes `handle` the session answered for, closing the one before (its writer claim released). */
  #switchTo(handle) {
    const previous = this.#native;
    this.#adopt(handle);
    sync(() => previous.close());
  }

  #call(method, params) {
    const text = JSON.stringify(params ?? {});
    return JSON.parse(sync(() => this.#native.call(method, text)));
  }

  #optional(method, params) {
    const value = this.#call(method, params);
    return value === null ? undefined : value;
  }

  // Files and sessions: what the archive has instead of a JSONL file.

  /** Not available: an archive session has no file to switch to. */
  setSessionFile(sessionFile) {
    throw cannot(
      "setSessionFile",
      `an archive session has no session file to switch to (${sessionFile}); open another archive session with archive.sessionManager(id), or import the file first (archive.importPiSessions(path))`,
    );
  }

  /** Starts a new, empty archive session (pi's `{ id, parentSession }`) and answers for it from now on. */
  newSession(options) {
    if (options?.id !== undefined) checkSessionId(options.id);
    const create = { id: options?.id, cwd: this.#cwd, parentSession: options?.parentSession };
    this.#switchTo(sync(() => this.#archive.native.createAppSession(JSON.stringify(create))));
    return undefined;
  }

  /** False: the session is in the archive, not in a JSONL file pi could reopen by path. */
  isPersisted() {
    return false;
  }

  /** The session's working directory (its header's; the process's if it has none, as pi). */
  getCwd() {
    return this.#cwd;
  }

  /** "": no sessions directory (as pi's in-memory manager). */
  getSessionDir() {
    return "";
  }

  /** False: no sessions directory. */
  usesDefaultSessionDir() {
    return false;
  }

  /** The archive session id. */
  getSessionId() {
    return this.#native.id;
  }

  /** Undefined: no session file. */
  getSessionFile() {
    return undefined;
  }

  /** Not available: pi's file writer; the archive writes each entry as it is appended. */
  _persist(_entry) {
    throw cannot("_persist", "the archive writes each entry as it is appended; there is no session file to write");
  }

  // Writers: each writes one entry to the archive, a child of the leaf, and moves the leaf to it.

  appendMessage(message) {
    return this.#call("appendMessage", { message });
  }
  appendThinkingLevelChange(thinkingLevel) {
    return this.#call("appendThinkingLevelChange", { thinkingLevel });
  }
  appendModelChange(provider, modelId) {
    return this.#call("appendModelChange", { provider, modelId });
  }
  appendUsage(kind, provider, model, usage, note) {
    return this.#call("appendUsage", { kind, provider, model, usage, note });
  }
  appendCompaction(summary, firstKeptEntryId, tokensBefore, details, fromHook, usage) {
    return this.#call("appendCompaction", { summary, firstKeptEntryId, tokensBefore, details, fromHook, usage });
  }
  appendCustomEntry(customType, data) {
    return this.#call("appendCustomEntry", { customType, data });
  }
  appendSessionInfo(name) {
    return this.#call("appendSessionInfo", { name });
  }
  appendCustomMessageEntry(customType, content, display, details) {
    return this.#call("appendCustomMessageEntry", { customType, content, display, details });
  }
  appendContextEdit(targetId, replacement) {
    return this.#call("appendContextEdit", { targetId, replacement });
  }
  appendLabelChange(targetId, label) {
    return this.#call("appendLabelChange", { targetId, label });
  }

  // Readers.

  getSessionName() {
    return this.#optional("getSessionName");
  }
  getLeafId() {
    return this.#call("getLeafId");
  }
  getLeafEntry() {
    return this.#optional("getLeafEntry");
  }
  getEntry(id) {
    return this.#optional("getEntry", { id });
  }
  getChildren(parentId) {
    return this.#call("getChildren", { parentId });
  }
  getLabel(id) {
    return this.#optional("getLabel", { id });
  }
  getBranch(fromId) {
    return this.#call("getBranch", { fromId });
  }
  buildContextEntries() {
    return this.#call("buildContextEntries");
  }
  buildSessionProjection() {
    return this.#call("buildSessionProjection");
  }
  buildSessionContext() {
    return this.#call("buildSessionContext");
  }
  getHeader() {
    return this.#call("getHeader");
  }
  getEntryCount() {
    return this.#call("getEntryCount");
  }
  getEntries() {
    return this.#call("getEntries");
  }
  getTree() {
    return this.#call("getTree");
  }

  // The leaf (in this object only, as in pi) and branches.

  branch(branchFromId) {
    this.#call("branch", { branchFromId });
  }
  resetLeaf() {
    this.#call("resetLeaf");
  }
  branchWithSummary(branchFromId, summary, details, fromHook, usage) {
    return this.#call("branchWithSummary", { branchFromId, summary, details, fromHook, usage });
  }

  /**
   * Starts a new archive session holding the path from the root to `leafId`
   * (label entries left out of the path and written again after it, as pi
   * does) and answers for it from now on; undefined (no file), as pi's
   * in-memory manager.
   */
  createBranchedSession(leafId) {
    const path = this.getBranch(leafId);
    if (path.length === 0) throw new Error(`Entry ${leafId} not found`);
    // The path without its label entries, each entry re-parented on the one
    // kept before it; a compaction that kept from a label keeps from the
    // entry after that label.
    const kept = [];
    const nextKept = new Map();
    let labelsWaiting = [];
    for (const entry of path) {
      if (entry.type === "label") {
        labelsWaiting.push(entry.id);
        continue;
      }
      for (const labelId of labelsWaiting) nextKept.set(labelId, entry.id);
      labelsWaiting = [];
      const parentId = kept.length ? kept[kept.length - 1].id : null;
      if (entry.type === "compaction" && entry.firstKeptEntryId !== entry.id) {
        const firstKeptEntryId = nextKept.get(entry.firstKeptEntryId) ?? entry.firstKeptEntryId;
        kept.push({ ...entry, parentId, firstKeptEntryId });
      } else {
        kept.push({ ...entry, parentId });
      }
    }
    // The labels in force, in the order pi's label map holds them, with the
    // time each was set; those on the path are written after it.
    const labels = new Map();
    for (const entry of this.getEntries()) {
      if (entry.type !== "label") continue;
      if (entry.label) labels.set(entry.targetId, { label: entry.label, timestamp: entry.timestamp });
      else labels.delete(entry.targetId);
    }
    const onPath = new Set(kept.map((e) => e.id));
    const ids = new Set(onPath);
    const written = [...kept];
    for (const [targetId, { label, timestamp }] of labels) {
      if (!onPath.has(targetId)) continue;
      const id = freshEntryId(ids);
      ids.add(id);
      written.push({ type: "label", id, parentId: written.length ? written[written.length - 1].id : null, timestamp, targetId, label });
    }
    const create = { cwd: this.#cwd };
    const lines = written.map((e) => JSON.stringify(e));
    this.#switchTo(sync(() => this.#archive.native.createAppSession(JSON.stringify(create), lines)));
    return undefined;
  }

  // Beyond pi's SessionManager.

  /**
   * Any method `sessiontree rpc --contract app` serves (e.g. `getSessionStats`,
   * `getUsageCostBreakdown`), answered in process: the value as parsed JSON.
   */
  request(method, params) {
    return this.#call(method, params);
  }

  /** Closes the session: its writer claim, if taken, is released. Later calls fail. */
  close() {
    sync(() => this.#native.close());
  }
}

/** A sessiontree archive: one SQLite file of many sessions, or a team archive on PostgreSQL. */
export class Archive {
  #native;

  constructor(handle) {
    this.#native = handle;
  }

  /**
   * Opens (creating if needed) the archive at `path`, by default the CLI's
   * (`$XDG_DATA_HOME/sessiontree/archive.db` or `~/.local/share/sessiontree/archive.db`);
   * a `postgres://` URL opens a team archive (import then rejects: `sessiontree sync` fills one).
   */
  static async open(path, { durability } = {}) {
    return new Archive(await engine(native.openArchive(path ?? undefined, durability)));
  }

  /** @internal the addon's handle. */
  get native() {
    return this.#native;
  }

  /** The archive file, or the team archive's URL. */
  get path() {
    return this.#native.path;
  }

  /** pi's `SessionStorage` for one session; the writer claim is taken at its first write. */
  async storage(sessionId) {
    return new ArchiveStorage(await engine(this.#native.openSession(sessionId)));
  }

  /**
   * pi 1.6's `SessionManager` over one session (the pi app's rules), for
   * `createAgentSession({ sessionManager })`; its leaf is the session's last
   * entry. Synchronous, as pi's `SessionManager.open`.
   */
  sessionManager(sessionId) {
    return new ArchiveSessionManager(this, sync(() => this.#native.openAppSession(sessionId)));
  }

  /**
   * A new, empty archive session as pi 1.6's `SessionManager` (pi's
   * `SessionManager.create(cwd, undefined, { id, parentSession })`).
   */
  createSessionManager(cwd, options) {
    if (options?.id !== undefined) checkSessionId(options.id);
    const create = { id: options?.id, cwd, parentSession: options?.parentSession };
    return new ArchiveSessionManager(this, sync(() => this.#native.createAppSession(JSON.stringify(create))));
  }

  /** pi's `SessionRepo` over this archive (pi's `Session`, or the one given). */
  repo(options) {
    return new ArchiveRepo(this, sessionClassOf(options));
  }

  /** Full-text search over message text, best first. */
  async search(query, options) {
    return JSON.parse(await engine(this.#native.search(query, optionsJson(options))));
  }

  /**
   * One page of the sessions, newest activity first (`sessiontree ls`'s
   * order), for pickers: id, cwd, creation time, name, last activity, entry
   * count and the pi file the session was imported from (`sourceFile`,
   * `null` when none exists). Its time does not grow with the archive
   * beyond the page.
   */
  async listSessions(options) {
    return JSON.parse(await engine(this.#native.listSessions(optionsJson(options)))).map((s) => ({
      ...s,
      lastActiveAt: s.lastActiveMs === null ? null : new Date(s.lastActiveMs).toISOString(),
    }));
  }

  /** The pi file each session was imported from (`null` where none exists on disk): what pi's `switchSession` opens. */
  async sourceFiles(sessionIds) {
    return JSON.parse(await engine(this.#native.sourceFiles([...sessionIds])));
  }

  /**
   * Imports one pi session file, incrementally: a file imported before gets
   * only its new complete lines appended (a half-written last line waits for
   * the next call); an unchanged file costs one stat. The work runs off the
   * JS thread. Rejects with a `SessionError` (e.g. `busy` while another
   * writer holds the archive).
   */
  async importPiFile(path) {
    return JSON.parse(await engine(this.#native.importFile(path)));
  }

  /** Archive-wide totals. */
  async stats() {
    return JSON.parse(await engine(this.#native.stats()));
  }

  /**
   * Imports pi session files (a file, or a directory searched recursively;
   * pi's sessions directory by default), as `sessiontree import` does:
   * idempotent, a file that grew gets its new entries appended, one bad file
   * never stops the others. `onProgress` is called after each file.
   */
  async importPiSessions(path, { onProgress } = {}) {
    const files = JSON.parse(await engine(this.#native.prepareImport(path ?? undefined)));
    const summary = {
      files: files.length,
      imported: 0,
      appended: 0,
      unchanged: 0,
      alreadyPresent: 0,
      inProgressElsewhere: 0,
      failed: [],
      entries: 0,
      bytes: 0,
    };
    for (const [i, file] of files.entries()) {
      let result;
      try {
        result = JSON.parse(await engine(this.#native.importFile(file)));
        summary[result.outcome] += 1;
        summary.entries += result.entries;
        summary.bytes += result.bytes;
      } catch (e) {
        result = { file, outcome: "failed", code: e.code ?? "unknown", message: e.message };
        summary.failed.push({ file, code: result.code, message: result.message });
      }
      onProgress?.({ file, filesDone: i + 1, filesTotal: files.length, result });
    }
    return summary;
  }

  /**
   * Exports a session as a pi JSONL file in pi's layout below `dir`. A
   * differing file there is refused unless `force` (then kept as `NAME.bak`).
   */
  async exportSession(sessionId, dir, { force } = {}) {
    return JSON.parse(await engine(this.#native.exportSession(sessionId, dir, force ?? false)));
  }
}
