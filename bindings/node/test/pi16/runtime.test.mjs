// pi 1.6's AgentSessionRuntime (what `/fork` and `/new` run) on
// archive.sessionManager: a manager that is not persisted to a file is
// forked in place, through its createBranchedSession and newSession, which
// start new archive sessions; the same flows on pi's in-memory manager
// write the same entries. `/new` builds pi's own in-memory manager (pi's
// rule for a manager without a file), which leaves the archive.
import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { Archive, ArchiveSessionManager } from "../../index.js";
import { tempDir } from "../helpers.mjs";
import { agentSession, ai, pi } from "./pi16.mjs";

const plain = (value) => JSON.parse(JSON.stringify(value));

/** The user message entry whose text is `text` (pi stores a prompt's content as text blocks). */
const userEntry = (entries, text) =>
  entries.find(
    (e) =>
      e.type === "message" &&
      e.message.role === "user" &&
      (e.message.content === text || (Array.isArray(e.message.content) && e.message.content.some((c) => c.text === text))),
  );

/** Entries with ids named by first appearance and times dropped (they differ between runs). */
function normalized(entries) {
  const names = new Map(entries.map((e, i) => [e.id, `#${i}`]));
  const walk = (v, key) => {
    if (Array.isArray(v)) return v.map((x) => walk(x, key));
    if (v && typeof v === "object") {
      return Object.fromEntries(
        Object.entries(v)
          .filter(([k]) => k !== "timestamp" && k !== "durationMs")
          .map(([k, x]) => [k, walk(x, k)]),
      );
    }
    return typeof v === "string" && names.has(v) && key !== "text" ? names.get(v) : v;
  };
  return walk(plain(entries));
}

async function flows(sessionManager, dir) {
  let faux;
  const createRuntime = async ({ cwd, sessionManager }) => {
    const made = await agentSession(sessionManager, cwd);
    faux = made.faux;
    return { session: made.session, services: { cwd, agentDir: dir, modelRuntime: made.modelRuntime }, diagnostics: [] };
  };
  const runtime = await pi.createAgentSessionRuntime(createRuntime, { cwd: dir, agentDir: dir, sessionManager });
  const say = async (prompt, reply) => {
    faux.setResponses([ai.fauxAssistantMessage(reply)]);
    await runtime.session.prompt(prompt);
  };
  const manager = () => runtime.session.sessionManager;
  const seen = {};
  try {
    await say("first", "one");
    await say("second", "two");
    seen.ids = [manager().getSessionId()];
    seen.before = manager().getEntries();
    // /fork at the second prompt: a new session of the path before it.
    const second = userEntry(manager().getEntries(), "second");
    seen.fork = await runtime.fork(second.id);
    seen.ids.push(manager().getSessionId());
    await say("after the fork", "three");
    seen.forked = manager().getEntries();
    // /fork at the first prompt: a new, empty session.
    const first = userEntry(manager().getEntries(), "first");
    seen.forkAtRoot = await runtime.fork(first.id);
    seen.ids.push(manager().getSessionId());
    await say("from scratch", "four");
    seen.fresh = manager().getEntries();
    seen.sameManager = manager() === sessionManager;
    // /new: pi builds its own in-memory manager for a manager without a file.
    await runtime.newSession();
    seen.newIsPis = manager() instanceof pi.SessionManager;
  } finally {
    await runtime.dispose();
  }
  return seen;
}

test("pi 1.6's AgentSessionRuntime forks an archive session into new archive sessions", async (t) => {
  const dir = tempDir(t, "sessiontree-pi16-");
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const theirs = await flows(pi.SessionManager.inMemory(dir), dir);
  const ourManager = archive.createSessionManager(dir);
  const ours = await flows(ourManager, dir);

  assert.deepEqual(ours.fork, { cancelled: false, selectedText: "second" });
  assert.deepEqual(ours.forkAtRoot, theirs.forkAtRoot);
  assert.equal(ours.sameManager, true);
  assert.equal(ours.newIsPis, true);
  assert.equal(new Set(ours.ids).size, 3);
  for (const key of ["before", "forked", "fresh"]) assert.deepEqual(normalized(ours[key]), normalized(theirs[key]), key);
  // Each session is in the archive as the runtime left it; the first is untouched by the forks.
  for (const [i, key] of [
    [0, "before"],
    [1, "forked"],
    [2, "fresh"],
  ]) {
    const reopened = archive.sessionManager(ours.ids[i]);
    assert.deepEqual(reopened.getEntries(), ours[key], key);
    reopened.close();
  }
  assert.ok(ourManager instanceof ArchiveSessionManager);
  ourManager.close();
});
