// Type-checked (not run) by test/pi16/types.test.mjs: index.d.ts against pi
// 1.6's own types (pi-coding-agent 1.6.0) for sessionManager(), beside pi
// 0.83's for storage(). Each line states what a pi app relies on.
import {
  createAgentSession,
  type SessionContext,
  type SessionEntry,
  SessionManager,
  type SessionTreeNode,
} from "@earendil-works/pi-coding-agent";
import type { SessionStorage } from "@earendil-works/pi-agent-core";
import { Archive, ArchiveSessionManager, type SessionMetadata } from "../../index.js";

export async function pi16RunsOnTheArchive(): Promise<void> {
  const archive = await Archive.open(undefined, { durability: "relaxed" });
  // The manager is pi's SessionManager: createAgentSession takes it as it is.
  const manager: ArchiveSessionManager = archive.sessionManager("id");
  const asPi: SessionManager = manager;
  const { session } = await createAgentSession({ sessionManager: archive.sessionManager("id") });
  const created = archive.createSessionManager("/w", { id: "new-id", parentSession: "parent" });
  // Synchronous, with pi's types.
  const id: string = manager.appendMessage({ role: "user", content: "hi", timestamp: 1 });
  const entries: SessionEntry[] = manager.getEntries();
  const context: SessionContext = manager.buildSessionContext();
  const tree: SessionTreeNode[] = manager.getTree();
  const leaf: string | null = manager.getLeafId();
  const branch: SessionEntry[] = manager.getBranch(id);
  const file: string | undefined = manager.getSessionFile();
  manager.branch(id);
  const usage = manager.appendUsage("cache_warm", "p", "m", {
    input: 1,
    output: 0,
    cacheRead: 0,
    cacheWrite: 0,
    totalTokens: 1,
    cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 },
  });
  const usageId: string = usage.id;
  // The extras.
  const stats: unknown = manager.request("getSessionStats");
  const isOurs: boolean = created instanceof ArchiveSessionManager;
  manager.close();
  // storage() stays pi 0.83's SessionStorage.
  const storage: SessionStorage<SessionMetadata> = await archive.storage("id");
  void [asPi, session, entries, context, tree, leaf, branch, file, usageId, stats, isOurs, storage];
}
