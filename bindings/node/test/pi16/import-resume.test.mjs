// A pi user's session, end to end: pi 1.6 writes it to its JSONL file (an
// AgentSession on pi's own persisted SessionManager), the archive imports
// it, archive.sessionManager answers as pi's SessionManager.open(file) does,
// pi's AgentSession resumes it on the archive as on the file, and pi opens
// the archive's export with the archive's entries, leaf and context.
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Archive } from "../../index.js";
import { tempDir } from "../helpers.mjs";
import { agentSession, ai, assertSameReads, pi, plain } from "./pi16.mjs";

const { fauxAssistantMessage: answer, fauxToolCall: toolCall } = ai;

async function converse(sessionManager, dir, turns) {
  const { session, faux } = await agentSession(sessionManager, dir);
  try {
    for (const [prompt, replies] of turns) {
      faux.setResponses(replies);
      await session.prompt(prompt);
    }
    return session.getSessionStats();
  } finally {
    session.dispose();
  }
}

/** Entries with ids named by order and times dropped: what two runs share. */
function shape(entries) {
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

test("a session pi 1.6 wrote: imported, answered as pi opens it, resumed by AgentSession, exported for pi", async (t) => {
  const dir = tempDir(t, "sessiontree-pi16-");
  writeFileSync(join(dir, "notes.txt"), "remember the milk\n");
  // pi 1.6 writes the session to its file.
  const written = pi.SessionManager.create(dir, join(dir, "sessions"));
  await converse(written, dir, [
    ["What is in notes.txt?", [answer([toolCall("read", { path: "notes.txt" }, { id: "call-1" })], { stopReason: "toolUse" }), answer("Milk.")]],
    ["Thanks.", [answer("You are welcome.")]],
  ]);
  const first = written.getEntries().find((e) => e.type === "message" && e.message.role === "assistant");
  written.appendLabelChange(first.id, " a label with spaces ");
  written.branch(first.id);
  written.appendMessage({ role: "user", content: [{ type: "text", text: "another branch" }], timestamp: 1 });
  const file = written.getSessionFile();

  // The archive imports it and answers as pi opening the file.
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const imported = await archive.importPiSessions(file);
  assert.equal(imported.imported, 1, JSON.stringify(imported));
  const id = written.getSessionId();
  const ours = archive.sessionManager(id);
  assertSameReads(ours, pi.SessionManager.open(file));

  // AgentSession resumes it on the archive as on pi's file.
  const turn = [["Where were we?", [answer("On another branch.")]]];
  const ourStats = await converse(ours, dir, turn);
  const theirsManager = pi.SessionManager.open(file);
  const theirStats = await converse(theirsManager, dir, turn);
  assert.deepEqual(shape(ours.getEntries()), shape(theirsManager.getEntries()));
  assert.deepEqual({ ...ourStats, sessionFile: undefined }, { ...theirStats, sessionFile: undefined });
  ours.close();

  // The archive's export opens in pi with the archive's entries, leaf, branch and context.
  const exported = await archive.exportSession(id, join(dir, "export"));
  const reopened = archive.sessionManager(id);
  assertSameReads(reopened, pi.SessionManager.open(exported.path));
  reopened.close();
});
