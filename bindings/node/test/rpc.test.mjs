// The binding and `sessiontree rpc` give the same answers on the same
// archive: every method the rpc serves, with valid and invalid parameters,
// over real pi sessions, before and after writes made through either side.
// Values are compared as JSON text (so key order counts), errors by code
// and message.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { test } from "node:test";
import { Archive } from "../index.js";
import { fixturesDir, sessiontreeBin, tempDir } from "./helpers.mjs";

/** `sessiontree --db DB rpc ID` as a child process, one request at a time. */
class Rpc {
  constructor(db, id) {
    this.child = spawn(sessiontreeBin(), ["--db", db, "--durability", "relaxed", "rpc", id], { stdio: ["pipe", "pipe", "inherit"] });
    this.lines = createInterface({ input: this.child.stdout })[Symbol.asyncIterator]();
    this.next = 1;
  }
  async call(method, params) {
    const id = this.next++;
    this.child.stdin.write(`${JSON.stringify({ id, method, params })}\n`);
    const { value: line, done } = await this.lines.next();
    assert.ok(!done, `rpc ended before answering ${method}`);
    const answer = JSON.parse(line);
    assert.equal(answer.id, id);
    return answer.ok ? { ok: true, value: JSON.stringify(answer.value) } : { ok: false, error: answer.error };
  }
  async close() {
    this.child.stdin.end();
    await new Promise((r) => this.child.on("exit", r));
  }
}

async function viaBinding(storage, method, params) {
  try {
    return { ok: true, value: JSON.stringify(await storage.request(method, params)) };
  } catch (e) {
    assert.equal(e.name, "SessionError", `${method}: not a SessionError: ${e.stack}`);
    return { ok: false, error: { code: e.code, message: e.message } };
  }
}

/** Read requests over a session: every method, every entry (up to `limit` of them), bad parameters. */
async function readRequests(storage, limit = 30) {
  const entries = await storage.getEntries();
  const ids = entries.map((e) => e.id);
  const step = Math.max(1, Math.floor(ids.length / limit));
  const some = ids.filter((_, i) => i % step === 0);
  const q = [
    ["getMetadata", {}],
    ["getLeafId", {}],
    ["getSessionName", {}],
    ["getSessionStats", {}],
    ["getEntries", {}],
    ["getEntries", { afterEntrySeq: 3, limit: 7 }],
    ["getEntries", { afterEntrySeq: ids.length + 5 }],
    ["getEntries", { limit: -1 }],
    ["getBranch", {}],
    ["buildContext", {}],
    ["getPathToRootOrCompaction", { leafId: null }],
    ["getPathToRootOrCompaction", { leafId: "no-such-entry" }],
    ["getEntriesToFork", {}],
    ["getEntriesToFork", { entryId: "no-such-entry" }],
    ["getEntry", { id: "no-such-entry" }],
    ["getEntry", {}],
    ["getLabel", { id: "no-such-entry" }],
    ["noSuchMethod", {}],
  ];
  for (const t of ["message", "compaction", "branch_summary", "label", "leaf", "session_info", "custom", "model_change", "thinking_level_change", "nope"]) {
    q.push(["findEntries", { type: t }]);
  }
  for (const id of some) {
    q.push(["getEntry", { id }], ["getLabel", { id }], ["getPathToRootOrCompaction", { leafId: id }]);
    q.push(["getBranch", { fromId: id }], ["buildContext", { fromId: id }]);
    q.push(["getEntriesToFork", { entryId: id, position: "before" }], ["getEntriesToFork", { entryId: id, position: "at" }]);
  }
  return q;
}

async function compareReads(rpc, storage, label) {
  let compared = 0;
  for (const [method, params] of await readRequests(storage)) {
    const a = await rpc.call(method, params);
    const b = await viaBinding(storage, method, params);
    assert.deepEqual(b, a, `${label}: ${method} ${JSON.stringify(params)}`);
    compared += 1;
  }
  return compared;
}

/** Writes, some refused, as pi names them; each side runs them as the session's writer. */
function writeRequests(tag, leaf) {
  return [
    ["appendMessage", { message: { role: "user", content: `from ${tag}`, timestamp: 1 } }],
    ["appendModelChange", { provider: "p", modelId: `m-${tag}` }],
    ["appendLabel", { targetId: leaf, label: `label ${tag}` }],
    ["appendSessionName", { name: `  name ${tag} ` }],
    ["appendEntry", { entry: { type: "custom", id: `fixed-${tag}`, parentId: leaf, timestamp: "2020-01-01T00:00:00.000Z", customType: "t", data: { big: 12345678901234567890, tiny: 5e-324 } } }],
    ["appendEntry", { entry: { type: "custom", id: `fixed-${tag}`, parentId: null, timestamp: "2020-01-01T00:00:00.000Z", customType: "dup" } }],
    ["setLeafId", { leafId: "no-such-entry" }],
    ["moveTo", { entryId: leaf, summary: { summary: `back (${tag})` } }],
    ["appendLabel", { targetId: "no-such-entry", label: "x" }],
    ["setLeafId", { leafId: `fixed-${tag}` }],
  ];
}

/** An answer with the ids and times a write generated replaced, to compare the two sides' writes. */
const shape = (answer) => JSON.parse(JSON.stringify(answer).replace(/\\"[0-9a-f]{8}\\"/g, '\\"<id>\\"').replace(/\b(binding|rpc)\b/g, "<tag>"));

test("the binding and `sessiontree rpc` give the same answers on the same archive", { timeout: 10 * 60 * 1000 }, async (t) => {
  const dir = tempDir(t);
  const db = join(dir, "a.db");
  const archive = await Archive.open(db, { durability: "relaxed" });
  await archive.importPiSessions(fixturesDir);
  let compared = 0;
  for (const { id } of await archive.repo().list()) {
    // Both read the session as imported.
    let storage = await archive.storage(id);
    let rpc = new Rpc(db, id);
    compared += await compareReads(rpc, storage, "imported");
    const leaf = await storage.getLeafId();

    // The binding writes (the rpc only reads meanwhile), then closes.
    const byBinding = [];
    for (const [method, params] of writeRequests("binding", leaf)) byBinding.push(await viaBinding(storage, method, params));
    await storage.close();
    storage = await archive.storage(id);
    compared += await compareReads(rpc, storage, "after the binding's writes");
    await rpc.close();

    // A fresh rpc writes the same requests; the binding then reads what it wrote.
    rpc = new Rpc(db, id);
    const byRpc = [];
    for (const [method, params] of writeRequests("rpc", leaf)) byRpc.push(await rpc.call(method, params));
    await rpc.close();
    assert.deepEqual(byBinding.map(shape), byRpc.map(shape), "the same writes answer alike");
    assert.ok(byBinding.some((a) => !a.ok) && byBinding.some((a) => a.ok));
    rpc = new Rpc(db, id);
    compared += await compareReads(rpc, storage, "after the rpc's writes");
    await rpc.close();
    await storage.close();
  }
  assert.ok(compared > 1000, `only ${compared} answers compared`);
});
