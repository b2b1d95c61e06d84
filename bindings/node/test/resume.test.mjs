// A 100,000-entry session (the bench crate's generator: a long conversation
// with forks and compactions) imported into an archive and resumed through
// the binding by pi's own Session: the context pi builds from the archive is
// the one pi builds from its own JSONL file, and a turn (a user message and
// a reply appended, the context built again) lands where pi's would.
import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { JsonlSessionStorage, Session } from "@earendil-works/pi-agent-core";
import { NodeExecutionEnv } from "@earendil-works/pi-agent-core/node";
import { Archive } from "../index.js";
import { generatorBin, run, tempDir } from "./helpers.mjs";

const ENTRIES = 100000;

function findJsonl(dir) {
  for (const name of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, name.name);
    if (name.isDirectory()) {
      const found = findJsonl(path);
      if (found) return found;
    } else if (name.name.endsWith(".jsonl")) return path;
  }
  return null;
}

test(`pi's Session resumes a ${ENTRIES}-entry session from the archive`, { timeout: 5 * 60 * 1000 }, async (t) => {
  const dir = tempDir(t);
  run(generatorBin(), ["gen", "--shape", "forked", "--entries", String(ENTRIES), "--seed", "13", "--out", join(dir, "sessions")]);
  const file = findJsonl(join(dir, "sessions"));
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const imported = await archive.importPiSessions(file);
  assert.equal(imported.imported, 1);
  assert.equal(imported.entries, ENTRIES);
  const [meta] = await archive.repo().list();

  const t0 = performance.now();
  const ours = new Session(await archive.storage(meta.id));
  const resumed = await ours.buildContext();
  const resumeMs = performance.now() - t0;

  const pi = new Session(await JsonlSessionStorage.open(new NodeExecutionEnv({ cwd: dir }), file));
  const expected = await pi.buildContext();
  assert.ok(resumed.messages.length > 10);
  assert.deepEqual(resumed, expected);
  assert.equal(await ours.getLeafId(), await pi.getLeafId());
  assert.deepEqual(await ours.getSessionStats(), await pi.getSessionStats());

  // One turn, without a model: what an agent harness appends, then the context again.
  for (const s of [ours, pi]) {
    await s.appendMessage({ role: "user", content: "and now?", timestamp: 1700000000000 });
    await s.appendMessage({
      role: "assistant",
      content: [{ type: "text", text: "resumed" }],
      api: "anthropic-messages",
      provider: "anthropic",
      model: "claude",
      usage: { input: 10, output: 2, cacheRead: 0, cacheWrite: 0, totalTokens: 12, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
      stopReason: "stop",
      timestamp: 1700000000001,
    });
  }
  const after = await ours.buildContext();
  assert.deepEqual(after, await pi.buildContext());
  assert.deepEqual(
    after.messages.slice(-2).map((m) => m.role),
    ["user", "assistant"],
  );
  assert.equal((await ours.getEntries({ afterEntrySeq: ENTRIES })).length, 2);
  console.log(`resume (open + buildContext) of ${ENTRIES} entries through the binding: ${resumeMs.toFixed(0)} ms`);
  await ours.getStorage().close();
});
