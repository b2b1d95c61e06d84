// pi 1.6's AgentSession (pi-coding-agent 1.6.0, `createAgentSession({
// sessionManager })`) running on the binding's `archive.sessionManager`, its
// model pi's faux provider: a prompt with a tool call, another prompt,
// `compact()`, `setSessionName`, `navigateTree` with and without a branch
// summary, a prompt on the new branch, the `/session` stats. The same
// scenario runs on pi's own in-memory SessionManager and both must agree;
// then the archive session, read back, must answer as pi's SessionManager
// does over the same entries.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Archive, ArchiveSessionManager } from "../../index.js";
import { tempDir } from "../helpers.mjs";
import { agentSession, ai, assertSameReads, pi, plain } from "./pi16.mjs";

const { fauxAssistantMessage: answer, fauxToolCall: toolCall } = ai;

/** Runs the scenario on `sessionManager`; returns what AgentSession answered along the way. */
async function scenario(sessionManager, dir) {
  writeFileSync(join(dir, "hello.txt"), "hello from a file\n");
  const { session, faux } = await agentSession(sessionManager, dir);
  const seen = [];
  session.subscribe((event) => {
    if (event.type === "message_end" || event.type === "tool_execution_end" || event.type.startsWith("compaction")) {
      seen.push(event.type === "message_end" ? `${event.type}:${event.message.role}` : event.type);
    }
  });
  try {
    // A prompt whose answer calls the read tool, then answers from its result.
    faux.setResponses([
      answer([toolCall("read", { path: "hello.txt" }, { id: "call-1" })], { stopReason: "toolUse" }),
      answer("The file says hello."),
    ]);
    await session.prompt("What does hello.txt say?");
    const firstAnswer = session.getLastAssistantText();
    faux.setResponses([answer("Still hello.")]);
    await session.prompt("And now?");

    // A manual compaction (the summary and a split turn's prefix summary).
    faux.setResponses([answer("## Goal\nRead hello.txt."), answer("The turn read a file.")]);
    const compaction = await session.compact();

    session.setSessionName("  archive\nsession  ");

    // Back to the first prompt with a summary of the abandoned branch, labelled.
    const firstUser = sessionManager.getEntries().find((e) => e.type === "message" && e.message.role === "user");
    faux.setResponses([answer("Abandoned: a read of hello.txt and a compaction.")]);
    const back = await session.navigateTree(firstUser.id, { summarize: true, label: "retry here" });
    faux.setResponses([answer("A new branch answer.")]);
    await session.prompt("Say something new.");

    // Onto the old branch's compaction without a summary (the leaf moves in memory only).
    const compactionEntry = sessionManager.getEntries().find((e) => e.type === "compaction");
    const onto = await session.navigateTree(compactionEntry.id);
    const leafAfterNavigate = sessionManager.getLeafId();

    // Usage outside the context (as pi's cache warmer writes it), then the /session stats.
    sessionManager.appendUsage("cache_warm", "faux", "faux-1", {
      input: 3,
      output: 0,
      cacheRead: 100,
      cacheWrite: 0,
      totalTokens: 103,
      cost: { input: 0.25, output: 0, cacheRead: 0.125, cacheWrite: 0, total: 0.375 },
    });
    const stats = session.getSessionStats();
    return {
      firstAnswer,
      compaction: { summary: compaction.summary, tokensBefore: compaction.tokensBefore, details: compaction.details },
      back: { editorText: back.editorText, cancelled: back.cancelled, summaryType: back.summaryEntry?.type },
      onto,
      leafAfterNavigate,
      stats,
      name: session.sessionName ?? sessionManager.getSessionName(),
      messages: session.messages.length,
      seen,
    };
  } finally {
    session.dispose();
  }
}

/**
 * The entries of a run with what differs between two runs taken out: ids
 * * named by order of first appearance, times (timestamps, a tool's duration) dropped.
 */
function normalized(entries, extra) {
  const names = new Map();
  const name = (id) => {
    if (!names.has(id)) names.set(id, `#${names.size}`);
    return names.get(id);
  };
  for (const e of entries) name(e.id);
  const walk = (v, key) => {
    if (Array.isArray(v)) return v.map((x) => walk(x));
    if (v && typeof v === "object") {
      const out = {};
      for (const [k, x] of Object.entries(v)) {
        if (k === "timestamp" || k === "labelTimestamp" || k === "durationMs") continue;
        out[k] = walk(x, k);
      }
      return out;
    }
    if (typeof v === "string" && names.has(v) && key !== undefined) return names.get(v);
    return v;
  };
  return { entries: walk(plain(entries)), extra: walk(plain(extra), "extra") };
}

/** pi's in-memory SessionManager over the entries `manager` holds, its leaf moved to `manager`'s. */
function piOver(manager) {
  const pim = pi.SessionManager.inMemory(manager.getCwd(), undefined, [manager.getHeader(), ...manager.getEntries()]);
  const leaf = manager.getLeafId();
  if (leaf === null) pim.resetLeaf();
  else pim.branch(leaf);
  return pim;
}

test("pi 1.6's AgentSession runs on archive.sessionManager as on pi's own SessionManager", async (t) => {
  const dir = tempDir(t, "sessiontree-pi16-");
  const archive = await Archive.open(join(dir, "archive.db"), { durability: "relaxed" });

  const theirs = pi.SessionManager.inMemory(dir);
  const piRun = await scenario(theirs, dir);

  const ours = archive.createSessionManager(dir);
  assert.ok(ours instanceof ArchiveSessionManager);
  const id = ours.getSessionId();
  const run = await scenario(ours, dir);

  // AgentSession saw the same conversation and wrote the same entries.
  assert.equal(run.firstAnswer, "The file says hello.");
  assert.deepEqual(run.seen, piRun.seen);
  assert.ok(run.seen.includes("tool_execution_end"));
  assert.deepEqual(run.back, { editorText: "What does hello.txt say?", cancelled: false, summaryType: "branch_summary" });
  assert.deepEqual(run.onto, { cancelled: false, editorText: undefined, summaryEntry: undefined });
  assert.equal(run.name, "archive session");
  const a = normalized(ours.getEntries(), { ...run, stats: { ...run.stats, sessionId: undefined } });
  const b = normalized(theirs.getEntries(), { ...piRun, stats: { ...piRun.stats, sessionId: undefined } });
  assert.deepEqual(a.entries, b.entries);
  assert.deepEqual(a.extra, b.extra);
  const types = ours.getEntries().map((e) => e.type);
  for (const type of ["model_change", "thinking_level_change", "message", "compaction", "session_info", "branch_summary", "label", "usage"]) {
    assert.ok(types.includes(type), `an entry of type ${type}`);
  }
  assert.ok(ours.getEntries().find((e) => e.type === "compaction").systemMessage, "the compaction keeps the system message");

  // The /session stats: AgentSession's over the archive, the app rpc's
  // (without contextUsage), and AgentSession's over pi's own manager of the same entries.
  assert.equal(run.stats.sessionId, id);
  assert.equal(run.stats.sessionFile, undefined);
  assert.ok(run.stats.toolCalls === 1 && run.stats.toolResults === 1 && run.stats.cost > 0);
  const { contextUsage, ...withoutContext } = run.stats;
  assert.ok(contextUsage);
  assert.deepEqual(ours.request("getSessionStats"), plain(withoutContext));

  // The live manager answers as pi's over the same entries, leaf included.
  assert.equal(ours.getLeafId(), ours.getEntries().at(-1).id);
  assertSameReads(ours, piOver(ours));
  ours.close();
  assert.throws(() => ours.getEntries(), /closed/);

  // Read back: the session reopened answers as pi's SessionManager over the same entries.
  const reopened = archive.sessionManager(id);
  assertSameReads(reopened, piOver(reopened));
  const piAgain = pi.SessionManager.inMemory(dir, undefined, [reopened.getHeader(), ...reopened.getEntries()]);
  const piSession = await agentSession(piAgain, dir);
  const reopenedSession = await agentSession(reopened, dir);
  try {
    assert.deepEqual(reopenedSession.session.getSessionStats(), piSession.session.getSessionStats());
    assert.deepEqual(plain(reopenedSession.session.messages), plain(piSession.session.messages));
  } finally {
    piSession.session.dispose();
    reopenedSession.session.dispose();
  }
  reopened.close();
});
