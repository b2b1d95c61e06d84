// Types of the npm package `sessiontree`, written by hand against pi's own
// types. Two contracts, two pis:
// - `archive.sessionManager(id)` is pi 1.6's `SessionManager`
//   (@earendil-works/pi-coding-agent 1.6.0, dist/core/session-manager.d.ts:
//   the pi app's session rules), which `createAgentSession({ sessionManager })`
//   takes;
// - `archive.storage(id)` and `archive.repo()` are pi's SDK storage interfaces
//   (`SessionStorage`, `SessionRepo` of @earendil-works/pi-agent-core 0.83.0,
//   dist/harness/types.d.ts), with pi's own entry types.
// pi is a peer dependency, so these are the types of the pi the application
// installed; a part whose pi is not installed types as `any`.
import type {
  NewSessionOptions,
  SessionManager as PiSessionManager,
} from "@earendil-works/pi-coding-agent";
import type {
  Session,
  SessionEntryCursorOptions,
  SessionErrorCode as PiSessionErrorCode,
  SessionStats,
  SessionStorage,
  SessionTreeEntry,
} from "@earendil-works/pi-agent-core";

export type { SessionEntryCursorOptions, SessionStats, SessionTreeEntry };

/** pi's error codes, and `usage` for a request that makes no sense. */
export type SessionErrorCode = PiSessionErrorCode | "usage";

/** Thrown by the storages and the repository: pi-agent-core 0.83's `SessionError` where it is installed (same class), else one of the same shape (also with pi 1.x, whose agent-core has none). `sessionManager()` throws pi 1.6's plain `Error`, with a `code`. */
export declare class SessionError extends Error {
  code: SessionErrorCode;
  constructor(code: SessionErrorCode, message: string, cause?: Error);
}

/** How hard an append works to survive a crash: `full` (default) survives power loss, `relaxed` a crash of the process. */
export type Durability = "full" | "relaxed";

/** A session's metadata (pi's `JsonlSessionMetadata`; archive sessions have no `path`). */
export interface SessionMetadata {
  id: string;
  createdAt: string;
  cwd?: string;
  path?: string;
  parentSessionPath?: string;
  metadata?: Record<string, unknown>;
}

/** pi's `SessionStorage`, plus `close()`, `request()` and the session id. */
export interface SessionTreeStorage extends SessionStorage<SessionMetadata> {
  /** Any method `sessiontree rpc` serves (pi's names, e.g. `buildContext`, `getBranch`), answered in process. */
  request(method: string, params?: Record<string, unknown>): Promise<unknown>;
  /** Waits for the calls in flight, then closes; releases the writer claim if this storage took it. */
  close(): Promise<void>;
  /** The session id. */
  readonly sessionId: string;
}

/** One session of an archive. Reads need nothing; the first write takes the session's writer claim. */
export declare class ArchiveStorage implements SessionTreeStorage {
  private constructor();
  readonly sessionId: string;
  getMetadata(): Promise<SessionMetadata>;
  getLeafId(): Promise<string | null>;
  /** Persists a `leaf` entry recording the active leaf (`not_found` for an unknown id). */
  setLeafId(leafId: string | null): Promise<void>;
  createEntryId(): Promise<string>;
  appendEntry(entry: SessionTreeEntry): Promise<void>;
  getEntry(id: string): Promise<SessionTreeEntry | undefined>;
  findEntries<TType extends SessionTreeEntry["type"]>(type: TType): Promise<Array<Extract<SessionTreeEntry, { type: TType }>>>;
  getLabel(id: string): Promise<string | undefined>;
  getSessionName(): Promise<string | undefined>;
  getSessionStats(): Promise<SessionStats>;
  getPathToRootOrCompaction(leafId: string | null): Promise<SessionTreeEntry[]>;
  getEntries(options?: SessionEntryCursorOptions): Promise<SessionTreeEntry[]>;
  request(method: string, params?: Record<string, unknown>): Promise<unknown>;
  close(): Promise<void>;
}

/** A pi JSONL session file served by sessiontree's Rust JSONL backend (appends go to the file). */
export declare class JsonlStorage implements SessionTreeStorage {
  private constructor();
  /** Opens an existing session file (`not_found` if there is none). */
  static open(path: string, options?: { durability?: Durability }): Promise<JsonlStorage>;
  readonly sessionId: string;
  getMetadata(): Promise<SessionMetadata>;
  getLeafId(): Promise<string | null>;
  /** Persists a `leaf` entry recording the active leaf (`not_found` for an unknown id). */
  setLeafId(leafId: string | null): Promise<void>;
  createEntryId(): Promise<string>;
  appendEntry(entry: SessionTreeEntry): Promise<void>;
  getEntry(id: string): Promise<SessionTreeEntry | undefined>;
  findEntries<TType extends SessionTreeEntry["type"]>(type: TType): Promise<Array<Extract<SessionTreeEntry, { type: TType }>>>;
  getLabel(id: string): Promise<string | undefined>;
  getSessionName(): Promise<string | undefined>;
  getSessionStats(): Promise<SessionStats>;
  getPathToRootOrCompaction(leafId: string | null): Promise<SessionTreeEntry[]>;
  getEntries(options?: SessionEntryCursorOptions): Promise<SessionTreeEntry[]>;
  request(method: string, params?: Record<string, unknown>): Promise<unknown>;
  close(): Promise<void>;
}

/** pi's `JsonlSessionCreateOptions`. */
export interface CreateOptions {
  id?: string;
  cwd: string;
  parentSessionPath?: string;
  metadata?: Record<string, unknown>;
}

/** pi's `SessionForkOptions` and create options; what is left out is inherited from the source. */
export interface ForkOptions {
  entryId?: string;
  position?: "before" | "at";
  id?: string;
  cwd?: string;
  parentSessionPath?: string;
  metadata?: Record<string, unknown>;
}

/** Which sessions `list` returns: those of `cwd`, newest first, `limit` of them after `offset`. */
export interface ListOptions {
  cwd?: string;
  limit?: number;
  offset?: number;
}

/**
 * The `Session` class a repository hands out: pi's (`new Session(storage)`).
 * Structural, so that this package does not depend on pi's types.
 */
export interface SessionClass<TSession> {
  new (storage: SessionStorage<SessionMetadata>): TSession;
}

/** pi's `SessionRepo` over an archive. `TSession` is pi's `Session`. */
export declare class ArchiveRepo<TSession = Session<SessionMetadata>> {
  private constructor();
  create(options: CreateOptions): Promise<TSession>;
  open(metadata: Pick<SessionMetadata, "id">): Promise<TSession>;
  list(options?: ListOptions): Promise<(SessionMetadata & { name?: string })[]>;
  delete(metadata: Pick<SessionMetadata, "id">): Promise<void>;
  fork(source: Pick<SessionMetadata, "id">, options: ForkOptions): Promise<TSession>;
}

/** One full-text search hit. */
export interface SearchHit {
  sessionId: string;
  entryId: string;
  role: string;
  sessionName: string | null;
  sessionCreatedAt: string;
  /** Text around the match, the match in `[` `]`. */
  snippet: string;
  /** BM25 rank, lower is better. */
  rank: number;
}

/** What `search` is narrowed to, and which page of hits. */
export interface SearchOptions {
  sessionId?: string;
  cwd?: string;
  role?: string;
  /** Default 20. */
  limit?: number;
  offset?: number;
}

/** Which sessions `listSessions` returns: those of `cwd` (exactly), or whose name contains `nameContains`; `limit` of them after `offset`. */
export interface ListSessionsOptions {
  cwd?: string;
  nameContains?: string;
  limit?: number;
  offset?: number;
}

/** One session as `listSessions` gives it. */
export interface SessionListing {
  id: string;
  cwd: string | null;
  createdAt: string;
  name: string | null;
  /** The newest entry's time (else the creation time), Unix ms and ISO-8601. */
  lastActiveMs: number | null;
  lastActiveAt: string | null;
  entryCount: number;
  /** The pi file it was imported from, where that file still exists. */
  sourceFile: string | null;
}

/** Archive-wide totals. */
export interface ArchiveStats {
  sessions: number;
  entries: number;
  stats: SessionStats;
  perCwd: { cwd: string; sessions: number; messages: number; costTotal: number }[];
}

/** What importing one file did. */
export interface FileImportResult {
  file: string;
  sessionId?: string;
  outcome: "imported" | "appended" | "unchanged" | "alreadyPresent" | "inProgressElsewhere" | "failed";
  entries?: number;
  bytes?: number;
  /** A torn last line left for a later import (pi may be writing it). */
  tornTailLine?: number | null;
  code?: SessionErrorCode;
  message?: string;
}

/** Progress of `importPiSessions`, after each file. */
export interface ImportProgress {
  file: string;
  filesDone: number;
  filesTotal: number;
  result: FileImportResult;
}

/** What `importPiSessions` did. */
export interface ImportSummary {
  files: number;
  imported: number;
  appended: number;
  unchanged: number;
  alreadyPresent: number;
  inProgressElsewhere: number;
  failed: { file: string; code: SessionErrorCode; message: string }[];
  entries: number;
  bytes: number;
}

/** What `exportSession` did at its path. */
export interface ExportResult {
  sessionId: string;
  path: string;
  outcome: "created" | "unchanged" | "appended" | "replaced";
  /** Where a replaced file was kept (`force`). */
  backup: string | null;
}

/**
 * pi 1.6's `SessionManager` (pi-coding-agent 1.6.0) over one archive session:
 * every public method, synchronous as pi's, answered by the rules
 * `sessiontree rpc --contract app` serves; pi's `createAgentSession({
 * sessionManager })` runs on it. Each entry is written to the archive as it
 * is appended; `branch`/`resetLeaf` move the leaf in this object only, as in
 * pi. There is no JSONL file: `isPersisted()` is false, `getSessionFile()`
 * undefined, `getSessionDir()` "" (as pi's in-memory manager);
 * `newSession` and `createBranchedSession` start a new archive session that
 * this object answers for from then on. `setSessionFile` and `_persist` (about
 * files) throw an error naming them. Errors are pi's (`Error`, with the
 * engine's `code`).
 */
export interface ArchiveSessionManager extends PiSessionManager {
  /**
   * Any method `sessiontree rpc --contract app` serves, answered in process
   * (e.g. `getSessionStats`: AgentSession's `/session` stats without
   * `contextUsage`; `getUsageCostBreakdown`).
   */
  request(method: string, params?: Record<string, unknown>): unknown;
  /** Closes the session: its writer claim, if taken, is released. Later calls throw. */
  close(): void;
}

/** The class of the managers `archive.sessionManager` returns (for `instanceof`); not constructed directly. */
export declare const ArchiveSessionManager: abstract new (never: never) => ArchiveSessionManager;

/** A sessiontree archive: many sessions in one SQLite file, or a team archive on PostgreSQL. */
export declare class Archive {
  private constructor();
  /**
   * Opens (creating if needed) the archive at `path`, by default the CLI's default archive;
   * a `postgres://` URL opens a team archive (import rejects there: `sessiontree sync` fills one).
   */
  static open(path?: string, options?: { durability?: Durability }): Promise<Archive>;
  /** The archive file, or the team archive's URL. */
  readonly path: string;
  /**
   * pi 1.6's `SessionManager` over one session (`not_found` if there is
   * none), for `createAgentSession({ sessionManager })`; its leaf is the
   * session's last entry. Synchronous, as pi's `SessionManager.open`.
   */
  sessionManager(sessionId: string): ArchiveSessionManager;
  /** A new, empty archive session as pi 1.6's `SessionManager` (as pi's `SessionManager.create(cwd, undefined, options)`). */
  createSessionManager(cwd: string, options?: NewSessionOptions): ArchiveSessionManager;
  /** pi 0.83's `SessionStorage` (pi-agent-core's SDK) for one session (`not_found` if there is none). */
  storage(sessionId: string): Promise<ArchiveStorage>;
  /**
   * pi 0.83's `SessionRepo`; sessions are pi-agent-core 0.83's `Session` (or the
   * class given): without either, it throws naming the pi it needs.
   */
  repo<TSession = Session<SessionMetadata>>(options?: { Session?: SessionClass<TSession> }): ArchiveRepo<TSession>;
  /** Full-text search over message text, best first. */
  search(query: string, options?: SearchOptions): Promise<SearchHit[]>;
  /**
   * One page of the sessions, newest activity first (`sessiontree ls`'s order), for
   * pickers; its time does not grow with the archive beyond the page.
   */
  listSessions(options?: ListSessionsOptions): Promise<SessionListing[]>;
  /** The pi file each session was imported from (`null` where none exists on disk): what pi's `switchSession` opens. */
  sourceFiles(sessionIds: Iterable<string>): Promise<Record<string, string | null>>;
  /**
   * Imports one pi session file incrementally (only lines new since the last
   * import; a half-written last line waits), off the JS thread. Rejects with a
   * `SessionError` (e.g. `busy` while another writer holds the archive).
   */
  importPiFile(path: string): Promise<FileImportResult>;
  /** Archive-wide totals. */
  stats(): Promise<ArchiveStats>;
  /** Imports pi session files (a file or a directory; pi's sessions directory by default), as `sessiontree import`. */
  importPiSessions(path?: string, options?: { onProgress?: (progress: ImportProgress) => void }): Promise<ImportSummary>;
  /** Exports a session as a pi JSONL file in pi's layout below `dir`; a differing file is refused unless `force`. */
  exportSession(sessionId: string, dir: string, options?: { force?: boolean }): Promise<ExportResult>;
}
