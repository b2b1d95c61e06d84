// sessiontree for Node: pi's SessionStorage and SessionRepo over sessiontree's
// SQLite archive, and its JSONL backend, in process. Every call runs in the
// Rust engine off the JS thread; sessions answer through the same dispatch
// as `sessiontree rpc`, so the binding and the rpc give the same answers.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const native = require("./sessiontree.node");

// pi's own classes when pi is installed (an optional peer dependency), so
// that errors are pi's `SessionError` (pi's harness tests `instanceof`) and
// the repository hands out pi's `Session`.
let pi = null;
try {
  pi = await import("@earendil-works/pi-agent-core");
} catch {
  pi = null;
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
      "archive.repo() needs pi's Session: install @earendil-works/pi-agent-core or pass { Session }",
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

  /** pi's `SessionRepo` over this archive (pi's `Session`, or the one given). */
  repo(options) {
    return new ArchiveRepo(this, sessionClassOf(options));
  }

  /** Full-text search over message text, best first. */
  async search(query, options) {
    return JSON.parse(await engine(this.#native.search(query, optionsJson(options))));
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
