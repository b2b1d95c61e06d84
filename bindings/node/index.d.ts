// Types of the npm package `sessiontree`, written by hand against pi's
// storage interfaces (`SessionStorage`, `SessionRepo` in
// @earendil-works/pi-agent-core 0.83.0, dist/harness/types.d.ts): the
// storages implement pi's `SessionStorage` with pi's own entry types, the
// repository pi's `SessionRepo` shape. pi is a peer dependency, so its types
// are those of the pi the application uses.
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

/** Thrown by every call: pi's `SessionError` where pi is installed (same class), else one of the same shape. */
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
  list(options?: ListOptions): Promise<(SessionMetadata & { name: string | null })[]>;
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
  /** pi's `SessionStorage` for one session (`not_found` if there is none). */
  storage(sessionId: string): Promise<ArchiveStorage>;
  /** pi's `SessionRepo`; sessions are pi's `Session` (or the class given). */
  repo<TSession = Session<SessionMetadata>>(options?: { Session?: SessionClass<TSession> }): ArchiveRepo<TSession>;
  /** Full-text search over message text, best first. */
  search(query: string, options?: SearchOptions): Promise<SearchHit[]>;
  /** Archive-wide totals. */
  stats(): Promise<ArchiveStats>;
  /** Imports pi session files (a file or a directory; pi's sessions directory by default), as `sessiontree import`. */
  importPiSessions(path?: string, options?: { onProgress?: (progress: ImportProgress) => void }): Promise<ImportSummary>;
  /** Exports a session as a pi JSONL file in pi's layout below `dir`; a differing file is refused unless `force`. */
  exportSession(sessionId: string, dir: string, options?: { force?: boolean }): Promise<ExportResult>;
}
