// archive.sessionManager against pi 1.6's own SessionManager, method by
// method: every public method is there; each writer writes the entry pi
// writes and each read answers as pi's over the same entries; errors are
// pi's; newSession and createBranchedSession start new archive sessions as
// pi's in-memory manager starts new sessions; what is about files says so;
// and `sessiontree rpc --contract app` answers as the binding does.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { Archive, ArchiveSessionManager } from "../../index.js";
import { run, sessiontreeBin, tempDir } from "../helpers.mjs";
import { pi, pi16Modules } from "./pi16.mjs";

const plain = (value) => (value === undefined ? undefined : JSON.parse(JSON.stringify(value)));

/** What pi and the archive may differ in: ids (named by first appearance) and timestamps. */
function normalized(value, ids) {
  const names = new Map();
  for (const id of ids) if (!names.has(id)) names.set(id, `#${names.size}`);
  const walk = (v, key) => {
    if (Array.isArray(v)) return v.map((x) => walk(x, key));
    if (v && typeof v === "object") {
      const out = {};
      for (const [k, x] of Object.entries(v)) if (k !== "timestamp" && k !== "labelTimestamp") out[k] = walk(x, k);
      return out;
    }
    return typeof v === "string" && names.has(v) && key !== "content" ? names.get(v) : v;
  };
  return walk(plain(value));
}

/** Calls `f` on both managers; both return, or both throw the same message. */
function both(ours, theirs, f) {
  let a;
  let b;
  let errA;
  let errB;
  try {
    a = f(ours);
  } catch (e) {
    errA = e;
  }
  try {
    b = f(theirs);
  } catch (e) {
    errB = e;
  }
  // Entry ids (8 hex digits) differ between the two.
  const message = (e) => e?.message.replace(/\b[0-9a-f]{8}\b/g, "<id>");
  assert.equal(message(errA), message(errB), `errors differ: ${errA?.stack ?? "none"} / ${errB?.stack ?? "none"}`);
  return [a, b];
}

const usage = (n) => ({
  input: n,
  output: 2 * n,
  cacheRead: 0,
  cacheWrite: 1,
  totalTokens: 3 * n + 1,
  cost: { input: 0.1 * n, output: 0.2, cacheRead: 0, cacheWrite: 0.01, total: 0.1 * n + 0.21 },
});

test("every public method of pi 1.6's SessionManager is on archive.sessionManager", async (t) => {
  const dts = readFileSync(join(pi16Modules, "@earendil-works", "pi-coding-agent", "dist", "core", "session-manager.d.ts"), "utf8");
  const declared = dts.slice(dts.indexOf("export declare class SessionManager"));
  const privateNames = new Set([...declared.matchAll(/^\s+private (\w+)/gm)].map((m) => m[1]));
  const methods = Object.getOwnPropertyNames(pi.SessionManager.prototype).filter((n) => n !== "constructor" && !privateNames.has(n));
  assert.ok(methods.length >= 35, `pi's public methods: ${methods}`);
  const archive = await Archive.open(join(tempDir(t), "a.db"), { durability: "relaxed" });
  const manager = archive.createSessionManager("/w");
  for (const name of methods) assert.equal(typeof manager[name], "function", `SessionManager.${name}`);
  manager.close();
});

test("writers write pi's entries, reads answer as pi's, errors are pi's", async (t) => {
  const archive = await Archive.open(join(tempDir(t), "a.db"), { durability: "relaxed" });
  const ours = archive.createSessionManager("/w");
  const theirs = pi.SessionManager.inMemory("/w");
  const ids = [];
  const step = (f) => {
    const [a, b] = both(ours, theirs, f);
    const aId = typeof a === "string" ? a : a?.id;
    const bId = typeof b === "string" ? b : b?.id;
    if (aId !== undefined) ids.push([aId, bId]);
    return [a, b];
  };
  const idsOf = (k) => ids.map((p) => p[k]);
  const at = (i) => (m) => idsOf(m === ours ? 0 : 1)[i];
  const check = () => {
    assert.deepEqual(normalized(ours.getEntries(), idsOf(0)), normalized(theirs.getEntries(), idsOf(1)));
    for (const read of [
      (m) => m.getLeafId(),
      (m) => m.getLeafEntry(),
      (m) => m.getBranch(),
      (m) => m.buildSessionContext(),
      (m) => m.buildContextEntries(),
      (m) => m.buildSessionProjection(),
      (m) => m.getTree(),
      (m) => m.getSessionName(),
      (m) => m.getEntryCount(),
    ]) {
      const [a, b] = both(ours, theirs, read);
      assert.deepEqual(normalized(a, idsOf(0)), normalized(b, idsOf(1)), read.toString());
    }
    for (let i = 0; i < ids.length; i++) {
      for (const read of [(m) => m.getBranch(at(i)(m)), (m) => m.getChildren(at(i)(m)), (m) => m.getLabel(at(i)(m)), (m) => m.getEntry(at(i)(m))]) {
        const [a, b] = both(ours, theirs, read);
        assert.deepEqual(normalized(a, idsOf(0)), normalized(b, idsOf(1)), `${read} of entry ${i}`);
      }
    }
  };

  step((m) => m.appendModelChange("anthropic", "claude"));
  step((m) => m.appendThinkingLevelChange("high"));
  step((m) => m.appendMessage({ role: "system", content: "", sections: { base: "You are pi." }, timestamp: 1 }));
  step((m) => m.appendMessage({ role: "user", content: "first", timestamp: 2 }));
  step((m) =>
    m.appendMessage({ role: "assistant", content: [{ type: "text", text: "one" }], provider: "anthropic", model: "claude", usage: usage(1), stopReason: "stop", timestamp: 3 }),
  );
  step((m) => m.appendUsage("cache_warm", "anthropic", "claude", usage(2), "a note"));
  step((m) => m.appendUsage("cache_warm", "anthropic", "claude", usage(3)));
  step((m) => m.appendCustomEntry("ext", { state: [1, 2] }));
  step((m) => m.appendCustomMessageEntry("ext", [{ type: "text", text: "injected" }], true, { d: 1 }));
  step((m) => m.appendContextEdit(at(3)(m), { content: "first, edited" }));
  step((m) => m.appendContextEdit(at(4)(m), { content: "one, edited" }));
  step((m) => m.appendContextEdit(at(8)(m), null));
  step((m) => m.appendLabelChange(at(3)(m), "  spaced label "));
  step((m) => m.appendSessionInfo("  a\nname "));
  step((m) => m.appendCompaction("summary", at(4)(m), 1234, { readFiles: [] }, false, usage(4)));
  step((m) => m.appendCompaction("again", null, 99));
  check();

  // Errors, as pi throws them.
  for (const bad of [
    (m) => m.appendContextEdit("nope", null),
    (m) => m.appendContextEdit(at(0)(m), null),
    (m) => m.appendContextEdit(at(3)(m), { content: 5 }),
    (m) => m.appendLabelChange("nope", "x"),
    (m) => m.branch("nope"),
    (m) => m.branchWithSummary("nope", "s"),
  ]) {
    const [a] = both(ours, theirs, bad);
    assert.equal(a, undefined);
  }
  assert.throws(() => ours.branch("nope"), { message: "Entry nope not found" });

  // The leaf moves in memory; the next append attaches there.
  both(ours, theirs, (m) => m.branch(at(4)(m)));
  step((m) => m.appendMessage({ role: "user", content: "second branch", timestamp: 5 }));
  step((m) => m.appendLabelChange(at(3)(m), undefined));
  step((m) => m.branchWithSummary(at(3)(m), "left the second branch", { why: 1 }, true, usage(5)));
  both(ours, theirs, (m) => m.resetLeaf());
  check();
  step((m) => m.appendMessage({ role: "user", content: "a new root", timestamp: 6 }));
  step((m) => m.branchWithSummary(null, "from the root"));
  step((m) => m.appendContextEdit(at(5)(m), null));
  check();
  // The app rpc's stats are AgentSession's over pi's entries (without contextUsage).
  const stats = ours.request("getSessionStats");
  assert.equal(stats.sessionId, ours.getSessionId());
  assert.equal(stats.assistantMessages, 1);
  assert.deepEqual(stats.tokens, { input: 15, output: 30, cacheRead: 0, cacheWrite: 5, total: 50 });
  ours.close();

  // Reopened: the leaf is the last entry, as pi's on open.
  const reopened = archive.sessionManager(ours.getSessionId());
  const piOpened = pi.SessionManager.inMemory("/w", undefined, [reopened.getHeader(), ...reopened.getEntries()]);
  assert.equal(reopened.getLeafId(), piOpened.getLeafId());
  assert.deepEqual(reopened.buildSessionProjection(), plain(piOpened.buildSessionProjection()));
  assert.deepEqual(reopened.getTree(), plain(piOpened.getTree()));
  reopened.close();
});

test("newSession and createBranchedSession start new archive sessions, as pi's in-memory manager", async (t) => {
  const archive = await Archive.open(join(tempDir(t), "a.db"), { durability: "relaxed" });
  const ours = archive.createSessionManager("/w", { id: "first-session" });
  assert.equal(ours.getSessionId(), "first-session");
  const theirs = pi.SessionManager.inMemory("/w");
  const build = (m) => {
    const u = m.appendMessage({ role: "user", content: "u1", timestamp: 1 });
    const a = m.appendMessage({ role: "assistant", content: [{ type: "text", text: "a1" }], provider: "p", model: "m", usage: usage(1), stopReason: "stop", timestamp: 2 });
    m.appendLabelChange(u, "start");
    const u2 = m.appendMessage({ role: "user", content: "u2", timestamp: 3 });
    m.appendLabelChange(a, "answer");
    m.appendLabelChange(u2, "gone");
    m.appendLabelChange(u2, "");
    const c = m.appendCompaction("sum", null, 10);
    m.branch(a);
    m.appendMessage({ role: "user", content: "other branch", timestamp: 4 });
    return { u, a, u2, c };
  };
  const mine = build(ours);
  const pis = build(theirs);
  const before = ours.getEntries();

  assert.equal(ours.createBranchedSession(mine.c), undefined);
  assert.equal(theirs.createBranchedSession(pis.c), undefined);
  const branchedId = ours.getSessionId();
  assert.notEqual(branchedId, "first-session");
  const ourEntries = ours.getEntries();
  const piEntries = theirs.getEntries();
  assert.deepEqual(
    normalized(ourEntries, ourEntries.map((e) => e.id)),
    normalized(piEntries, piEntries.map((e) => e.id)),
  );
  assert.deepEqual(
    normalized(ours.getTree(), ourEntries.map((e) => e.id)),
    normalized(theirs.getTree(), piEntries.map((e) => e.id)),
  );
  assert.equal(ours.getLabel(mine.u), "start");
  assert.equal(ours.getLabel(mine.a), "answer");
  assert.equal(ours.getLeafId(), ourEntries.at(-1).id);
  assert.deepEqual(ours.getHeader().parentSession, theirs.getHeader().parentSession);
  // The old session is untouched; the new one is an archive session of its own.
  const old = archive.sessionManager("first-session");
  assert.deepEqual(old.getEntries(), before);
  old.close();
  const listed = (await archive.repo({ Session: class {} }).list()).map((m) => m.id);
  assert.ok(listed.includes(branchedId));
  assert.throws(() => ours.createBranchedSession("nope"), { message: "Entry nope not found" });

  // newSession: a new, empty archive session, pi's options honoured.
  assert.equal(ours.newSession({ id: "second-session", parentSession: "first-session" }), undefined);
  assert.equal(ours.getSessionId(), "second-session");
  assert.deepEqual(ours.getEntries(), []);
  assert.equal(ours.getLeafId(), null);
  assert.equal(ours.getHeader().parentSession, "first-session");
  assert.equal(ours.getHeader().cwd, "/w");
  const id = ours.appendMessage({ role: "user", content: "in the new session", timestamp: 5 });
  assert.deepEqual(archive.sessionManager("second-session").getBranch(id).length, 1);
  assert.throws(() => ours.newSession({ id: "bad id" }), (e) => {
    assert.throws(() => theirs.newSession({ id: "bad id" }), { message: /^Session id must be non-empty/ });
    return /^Session id must be non-empty/.test(e.message);
  });
  ours.newSession();
  assert.notEqual(ours.getSessionId(), "second-session");
  ours.close();
});

test("what is about files: no file, no directory, and a clear error where pi would use one", async (t) => {
  const archive = await Archive.open(join(tempDir(t), "a.db"), { durability: "relaxed" });
  const manager = archive.createSessionManager("/work/project");
  assert.equal(manager.isPersisted(), false);
  assert.equal(manager.getSessionFile(), undefined);
  assert.equal(manager.getSessionDir(), "");
  assert.equal(manager.usesDefaultSessionDir(), false);
  assert.equal(manager.getCwd(), "/work/project");
  assert.throws(() => manager.setSessionFile("/tmp/x.jsonl"), {
    message: /^SessionManager\.setSessionFile: an archive session has no session file to switch to \(\/tmp\/x\.jsonl\)/,
  });
  assert.throws(() => manager._persist({}), { message: /^SessionManager\._persist: / });
  assert.throws(() => archive.sessionManager("missing"), (e) => e.code === "not_found" && /missing/.test(e.message));
  // One writer per session.
  manager.appendMessage({ role: "user", content: "x", timestamp: 1 });
  const second = archive.sessionManager(manager.getSessionId());
  assert.throws(() => second.appendMessage({ role: "user", content: "y", timestamp: 2 }), (e) => e.code === "storage" && /already open for writing/.test(e.message));
  manager.close();
  second.appendMessage({ role: "user", content: "y", timestamp: 2 });
  second.close();
  assert.throws(() => second.getEntries(), /closed/);
});

/** `sessiontree --db DB rpc --contract app ID`, one request at a time. */
class AppRpc {
  constructor(db, id) {
    this.child = spawn(sessiontreeBin(), ["--db", db, "--durability", "relaxed", "rpc", "--contract", "app", id], { stdio: ["pipe", "pipe", "inherit"] });
    this.lines = createInterface({ input: this.child.stdout })[Symbol.asyncIterator]();
    this.next = 1;
  }
  async call(method, params) {
    const id = this.next++;
    this.child.stdin.write(`${JSON.stringify({ id, method, params })}\n`);
    const { value: line, done } = await this.lines.next();
    assert.ok(!done, `rpc ended before answering ${method}`);
    const answer = JSON.parse(line);
    return answer.ok ? { value: JSON.stringify(answer.value) } : { error: answer.error.message };
  }
  async close() {
    this.child.stdin.end();
    await new Promise((r) => this.child.on("exit", r));
  }
}

test("sessiontree rpc --contract app answers as archive.sessionManager does", async (t) => {
  const dir = tempDir(t);
  const db = join(dir, "a.db");
  const archive = await Archive.open(db, { durability: "relaxed" });
  const manager = archive.createSessionManager("/w");
  const u = manager.appendMessage({ role: "user", content: "hello", timestamp: 1 });
  const a = manager.appendMessage({ role: "assistant", content: [{ type: "text", text: "hi" }], provider: "p", model: "m", usage: usage(1), stopReason: "stop", timestamp: 2 });
  manager.appendLabelChange(u, "start");
  manager.appendContextEdit(a, { content: "edited" });
  manager.appendSessionInfo("named");
  manager.appendCompaction("sum", a, 5);
  const id = manager.getSessionId();
  manager.close();

  const reader = archive.sessionManager(id);
  const rpc = new AppRpc(db, id);
  try {
    const requests = [
      ["getSessionId", {}],
      ["getHeader", {}],
      ["getLeafId", {}],
      ["getLeafEntry", {}],
      ["getEntries", {}],
      ["getEntryCount", {}],
      ["getBranch", {}],
      ["getBranch", { fromId: a }],
      ["getBranch", { fromId: "nope" }],
      ["getEntry", { id: u }],
      ["getEntry", { id: "nope" }],
      ["getChildren", { parentId: u }],
      ["getLabel", { id: u }],
      ["getSessionName", {}],
      ["getTree", {}],
      ["buildSessionContext", {}],
      ["buildContextEntries", {}],
      ["buildSessionProjection", {}],
      ["getSessionStats", {}],
      ["getUsageCostBreakdown", {}],
      ["branch", { branchFromId: "nope" }],
    ];
    for (const [method, params] of requests) {
      let ours;
      try {
        ours = { value: JSON.stringify(reader.request(method, params)) };
      } catch (e) {
        ours = { error: e.message };
      }
      assert.deepEqual(ours, await rpc.call(method, params), `${method} ${JSON.stringify(params)}`);
    }
    // The methods themselves answer as the requests do (pi's undefined as undefined).
    assert.deepEqual(reader.getTree(), reader.request("getTree"));
    assert.equal(reader.getEntry("nope"), undefined);
    assert.equal(reader.request("getEntry", { id: "nope" }), null);
  } finally {
    await rpc.close();
    reader.close();
  }
});

test("the managers are ArchiveSessionManager instances", async (t) => {
  const archive = await Archive.open(join(tempDir(t), "a.db"), { durability: "relaxed" });
  const manager = archive.createSessionManager("/w");
  assert.ok(manager instanceof ArchiveSessionManager);
  manager.close();
});

test("sessions the managers create follow the app's rules; an SDK session is refused", async (t) => {
  const dir = tempDir(t);
  const db = join(dir, "a.db");
  const archive = await Archive.open(db, { durability: "relaxed" });
  const manager = archive.createSessionManager("/w");
  manager.appendMessage({ role: "user", content: "x", timestamp: 1 });
  manager.newSession();
  manager.appendMessage({ role: "user", content: "y", timestamp: 2 });
  const appIds = [manager.getSessionId()];
  manager.close();
  class Session {
    constructor(storage) {
      this.storage = storage;
    }
  }
  const sdk = await archive.repo({ Session }).create({ cwd: "/w" });
  const sdkId = sdk.storage.sessionId;
  await sdk.storage.close();
  const listed = JSON.parse(run(sessiontreeBin(), ["--db", db, "ls", "--json"])).sessions;
  const contracts = Object.fromEntries(listed.map((s) => [s.id, s.contract]));
  assert.equal(contracts[appIds[0]], "app");
  assert.equal(Object.values(contracts).filter((c) => c === "app").length, 2);
  assert.equal(contracts[sdkId], "sdk");
  assert.throws(() => archive.sessionManager(sdkId), (e) => {
    assert.equal(e.code, "usage");
    assert.match(e.message, /follows the SDK contract .*archive\.storage\(id\)/);
    return true;
  });
});
