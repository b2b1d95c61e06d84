// Type-checked (not run) by test/types.test.mjs: the package's index.d.ts
// against pi's own interfaces. Each line states what a pi app relies on.
import { Session, type SessionStorage, type SessionTreeEntry } from "@earendil-works/pi-agent-core";
import { Archive, ArchiveStorage, JsonlStorage, SessionError, type SessionMetadata } from "../index.js";

export async function piUsesTheBinding(): Promise<void> {
  const archive = await Archive.open(undefined, { durability: "relaxed" });
  // The storages are pi SessionStorages; pi's Session takes them.
  const storage: SessionStorage<SessionMetadata> = await archive.storage("id");
  const session: Session<SessionMetadata> = new Session(await archive.storage("id"));
  const jsonl: SessionStorage<SessionMetadata> = await JsonlStorage.open("/tmp/x.jsonl");
  // Entries are pi's entry types, narrowed by findEntries as pi's are.
  const labels = await storage.findEntries("label");
  const target: string = labels[0].targetId;
  const entry: SessionTreeEntry | undefined = await storage.getEntry(target);
  // The repository hands out pi Sessions.
  const repo = archive.repo();
  const created: Session<SessionMetadata> = await repo.create({ cwd: "/w", metadata: { app: 1 } });
  const listed: SessionMetadata[] = await repo.list({ cwd: "/w", limit: 10, offset: 0 });
  const forked: Session<SessionMetadata> = await repo.fork(listed[0], { entryId: target, position: "at" });
  await repo.delete(listed[0]);
  // Errors carry pi's codes.
  const code: string = new SessionError("storage", "x").code;
  // The extras.
  const hits = await archive.search("q", { cwd: "/w", limit: 5 });
  const snippet: string = hits[0].snippet;
  const totals = await archive.stats();
  const done = await archive.importPiSessions(undefined, { onProgress: (p) => p.filesDone / p.filesTotal });
  const exported = await archive.exportSession("id", "/tmp/out", { force: false });
  const closing: Promise<void> = (storage as ArchiveStorage).close();
  void [session, jsonl, entry, created, forked, code, snippet, totals.stats.costTotal, done.failed, exported.path, closing];
}
