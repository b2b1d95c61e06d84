// The binding's API against a real archive and real JSONL files: pi's
// SessionRepo and SessionStorage semantics, exact entry JSON, error codes,
// the writer claim within one process, and the extras.
import assert from "node:assert/strict";
import { copyFileSync, readFileSync, readdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { JsonlSessionRepo, JsonlSessionStorage, Session, SessionError as PiSessionError } from "@earendil-works/pi-agent-core";
import { NodeExecutionEnv } from "@earendil-works/pi-agent-core/node";
import { Archive, ArchiveStorage, JsonlStorage, SessionError } from "../index.js";
import { fixturesDir, tempDir } from "./helpers.mjs";

const user = (text, timestamp = 1) => ({ role: "user", content: text, timestamp });

async function rejects(promise, code, message) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof SessionError, `a SessionError, not ${e}`);
    assert.equal(e.code, code);
    if (message) assert.match(e.message, message);
    return true;
  });
}

test("errors are pi's SessionError when pi is installed", () => {
  assert.equal(SessionError, PiSessionError);
});

test("repo: create, list (cwd filter, newest first, paged), open, delete", async (t) => {
  const dir = tempDir(t);
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const repo = archive.repo();
  await rejects(repo.create({ cwd: "" }), "invalid_session");
  const made = [];
  for (let i = 0; i < 5; i++) {
    const s = await repo.create({ cwd: i % 2 ? "/odd" : "/even", metadata: { n: i } });
    assert.ok(s instanceof Session);
    await s.appendMessage(user(`message ${i}`));
    if (i === 4) await s.appendSessionName("four");
    made.push(await s.getMetadata());
    await s.getStorage().close();
    await new Promise((r) => setTimeout(r, 2));
  }
  const all = await repo.list();
  assert.deepEqual(
    all.map((m) => m.id),
    made.map((m) => m.id).reverse(),
  );
  // The list carries a session's name where it has one, pi's metadata otherwise.
  assert.deepEqual(all[0], { ...made[4], name: "four" });
  assert.deepEqual(all[1], made[3]);
  assert.deepEqual(made[4].metadata, { n: 4 });
  const odd = await repo.list({ cwd: "/odd" });
  assert.deepEqual(
    odd.map((m) => m.id),
    [made[3].id, made[1].id],
  );
  const page = await repo.list({ limit: 2, offset: 1 });
  assert.deepEqual(
    page.map((m) => m.id),
    [made[3].id, made[2].id],
  );
  const opened = await repo.open(made[2]);
  assert.equal((await opened.getBranch())[0].message.content, "message 2");
  await repo.delete(made[2]);
  await rejects(repo.open(made[2]), "not_found");
  assert.equal((await repo.list()).length, 4);
});

test("repo: fork keeps entry ids, with pi's before/at semantics and inherited fields", async (t) => {
  const dir = tempDir(t);
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const repo = archive.repo();
  const s = await repo.create({ cwd: "/w", metadata: { app: "x" } });
  const u1 = await s.appendMessage(user("first"));
  const a1 = await s.appendMessage({ role: "assistant", content: [{ type: "text", text: "ok" }], timestamp: 2 });
  const u2 = await s.appendMessage(user("second"));
  const source = await s.getMetadata();
  const before = await repo.fork(source, { entryId: u2 });
  assert.deepEqual(
    (await before.getEntries()).map((e) => e.id),
    [u1, a1],
  );
  const meta = await before.getMetadata();
  assert.equal(meta.cwd, "/w");
  assert.deepEqual(meta.metadata, { app: "x" });
  assert.equal(meta.parentSessionPath, source.id);
  const at = await repo.fork(source, { entryId: a1, position: "at", cwd: "/other", id: "fork-at" });
  assert.equal((await at.getMetadata()).id, "fork-at");
  assert.deepEqual(
    (await at.getEntries()).map((e) => e.id),
    [u1, a1],
  );
  await rejects(repo.fork(source, { entryId: a1 }), "invalid_fork_target", /not a user message/);
  await rejects(repo.fork(source, { entryId: "nope" }), "invalid_fork_target");
  const whole = await repo.fork(source, {});
  assert.equal((await whole.getEntries()).length, 3);
});

test("storage: every SessionStorage method, entries as their exact stored JSON", async (t) => {
  const dir = tempDir(t);
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const created = await archive.repo().create({ cwd: "/w" });
  const id = (await created.getMetadata()).id;
  await created.getStorage().close();
  const st = await archive.storage(id);
  assert.ok(st instanceof ArchiveStorage);
  assert.equal(await st.getLeafId(), null);
  // Odd key order and numbers JavaScript would print differently survive as stored.
  const text =
    '{"type":"message","timestamp":"2020-01-01T00:00:00.000Z","parentId":null,"id":"e1","message":{"timestamp":5,"role":"user","content":"hi","cost":0.30000000000000004}}';
  await st.appendEntry(JSON.parse(text));
  assert.equal(JSON.stringify(await st.getEntry("e1")), text);
  assert.equal(await st.getEntry("missing"), undefined);
  assert.equal(await st.getLeafId(), "e1");
  const fresh = await st.createEntryId();
  assert.match(fresh, /^[0-9a-f]{8}$/);
  await st.appendEntry({ type: "label", id: "l1", parentId: "e1", timestamp: "2020-01-01T00:00:01.000Z", targetId: "e1", label: "start" });
  assert.equal(await st.getLabel("e1"), "start");
  assert.equal(await st.getLabel("l1"), undefined);
  assert.equal(await st.getSessionName(), undefined);
  await st.appendEntry({ type: "session_info", id: "n1", parentId: "l1", timestamp: "2020-01-01T00:00:02.000Z", name: "  my name " });
  assert.equal(await st.getSessionName(), "my name");
  await st.setLeafId("e1");
  assert.equal(await st.getLeafId(), "e1");
  await rejects(st.setLeafId("nope"), "not_found", /Entry nope not found/);
  await st.setLeafId(null);
  assert.equal(await st.getLeafId(), null);
  assert.deepEqual(
    (await st.findEntries("leaf")).map((e) => e.targetId),
    ["e1", null],
  );
  assert.deepEqual(
    (await st.getPathToRootOrCompaction("n1")).map((e) => e.id),
    ["e1", "l1", "n1"],
  );
  assert.deepEqual(await st.getPathToRootOrCompaction(null), []);
  const all = await st.getEntries();
  assert.equal(all.length, 5);
  assert.deepEqual(
    (await st.getEntries({ afterEntrySeq: 1, limit: 2 })).map((e) => e.id),
    all.slice(1, 3).map((e) => e.id),
  );
  assert.deepEqual(await st.getSessionStats(), { messageCount: 1, cachedTokens: 0, uncachedTokens: 0, totalTokens: 0, costTotal: 0 });
  const meta = await st.getMetadata();
  assert.equal(meta.id, id);
  assert.equal(meta.cwd, "/w");
  await rejects(st.appendEntry({ type: "message", id: "e1", parentId: null, timestamp: "t", message: user("dup") }), "invalid_entry");
  // Calls made together run in order.
  const [a, b, leaf] = await Promise.all([st.setLeafId("e1"), st.setLeafId("l1"), st.getLeafId()]);
  assert.equal(a, undefined);
  assert.equal(b, undefined);
  assert.equal(leaf, "l1");
  await st.close();
  await rejects(st.getLeafId(), "storage", /closed/);
});

test("pi's Session over the archive: appends, moves, context", async (t) => {
  const dir = tempDir(t);
  const archive = await Archive.open(join(dir, "a.db"));
  const session = await archive.repo().create({ cwd: "/w" });
  const u = await session.appendMessage(user("question"));
  await session.appendModelChange("anthropic", "claude");
  await session.appendThinkingLevelChange("high");
  const a = await session.appendMessage({ role: "assistant", content: [{ type: "text", text: "answer" }], timestamp: 3 });
  await session.appendLabel(a, "good");
  const before = await session.buildContext();
  assert.equal(before.thinkingLevel, "high");
  assert.deepEqual(
    before.messages.map((m) => m.role),
    ["user", "assistant"],
  );
  await session.moveTo(u, { summary: "went back" });
  const context = await session.buildContext();
  assert.equal(context.thinkingLevel, "off");
  assert.deepEqual(
    context.messages.map((m) => m.role),
    ["user", "branchSummary"],
  );
  assert.equal(await session.getLabel(a), "good");
  const id = (await session.getMetadata()).id;
  await session.getStorage().close();
  const again = new Session(await archive.storage(id));
  assert.deepEqual(await again.buildContext(), context);
});

test("writer claim: one writer per session; close releases it", async (t) => {
  const dir = tempDir(t);
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const first = await archive.repo().create({ cwd: "/w" });
  await first.appendMessage(user("one"));
  const id = (await first.getMetadata()).id;
  const second = new Session(await archive.storage(id));
  assert.equal((await second.getEntries()).length, 1, "reading needs no claim");
  await rejects(second.appendMessage(user("two")), "storage", /already open for writing/);
  await first.getStorage().close();
  await second.appendMessage(user("two"));
  assert.equal((await second.getEntries()).length, 2);
});

test("JsonlStorage answers as pi's JsonlSessionStorage on real pi sessions", async (t) => {
  const dir = tempDir(t);
  // The fixtures are pi's older file versions, which pi's storage no longer
  // opens: the archive's export writes them as version 3 first.
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  await archive.importPiSessions(fixturesDir);
  const sessions = await archive.repo().list();
  assert.ok(sessions.length >= 2);
  for (const m of sessions) {
    const { path } = await archive.exportSession(m.id, join(dir, "out"));
    const ours = join(dir, `ours-${m.id}.jsonl`);
    const theirs = join(dir, `pi-${m.id}.jsonl`);
    copyFileSync(path, ours);
    copyFileSync(path, theirs);
    const st = await JsonlStorage.open(ours, { durability: "relaxed" });
    const pi = await JsonlSessionStorage.open(new NodeExecutionEnv({ cwd: dir }), theirs);
    const leaf = await pi.getLeafId();
    assert.equal(await st.getLeafId(), leaf);
    assert.deepEqual(await st.getEntries(), await pi.getEntries());
    assert.deepEqual(await st.getPathToRootOrCompaction(leaf), await pi.getPathToRootOrCompaction(leaf));
    assert.deepEqual(await st.getSessionStats(), await pi.getSessionStats());
    assert.deepEqual(await st.findEntries("compaction"), await pi.findEntries("compaction"));
    const { path: _ours, ...ourMeta } = await st.getMetadata();
    const { path: _theirs, ...piMeta } = await pi.getMetadata();
    assert.deepEqual(ourMeta, JSON.parse(JSON.stringify(piMeta)));
    assert.deepEqual(await new Session(st).buildContext(), await new Session(pi).buildContext());
    // An append through the binding lands in the file as pi reads it.
    const added = await new Session(st).appendMessage(user("appended from node"));
    await st.close();
    const reread = await JsonlSessionStorage.open(new NodeExecutionEnv({ cwd: dir }), ours);
    assert.equal((await reread.getEntry(added)).message.content, "appended from node");
    assert.equal(await reread.getLeafId(), added);
  }
  await rejects(JsonlStorage.open(join(dir, "missing.jsonl")), "not_found");
});

test("extras: importPiSessions with progress, search, stats, exportSession", async (t) => {
  const dir = tempDir(t);
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const seen = [];
  const summary = await archive.importPiSessions(fixturesDir, { onProgress: (p) => seen.push(p) });
  const files = readdirSync(fixturesDir).filter((f) => f.endsWith(".jsonl"));
  assert.equal(summary.files, files.length);
  assert.equal(summary.imported, files.length);
  assert.deepEqual(summary.failed, []);
  assert.deepEqual(
    seen.map((p) => p.filesDone),
    files.map((_, i) => i + 1),
  );
  assert.equal(seen[0].result.outcome, "imported");
  const again = await archive.importPiSessions(fixturesDir);
  assert.equal(again.unchanged, files.length);

  const listed = await archive.repo().list();
  assert.equal(listed.length, files.length);
  const stats = await archive.stats();
  assert.equal(stats.sessions, files.length);
  let messages = 0;
  for (const m of listed) messages += (await (await archive.storage(m.id)).getSessionStats()).messageCount;
  assert.equal(stats.stats.messageCount, messages);

  // A word from a real user message is found, in that entry.
  const st = await archive.storage(listed[0].id);
  const textOf = (m) => (typeof m.content === "string" ? m.content : m.content.filter((c) => c.type === "text").map((c) => c.text).join(" "));
  const firstUser = (await st.findEntries("message")).find((e) => e.message.role === "user" && /[A-Za-z]{6,}/.test(textOf(e.message)));
  const word = textOf(firstUser.message).match(/[A-Za-z]{6,}/)[0];
  const hits = await archive.search(word, { sessionId: listed[0].id, limit: 50 });
  assert.ok(hits.length > 0);
  assert.ok(hits.every((h) => h.sessionId === listed[0].id));
  assert.ok(hits.some((h) => h.entryId === firstUser.id));
  assert.deepEqual(await archive.search("zzzqqqnotaword"), []);

  // Export writes the session as pi's version 3 file, pi reads it back as
  // the archive holds it, and a differing file is never clobbered.
  const out = join(dir, "out");
  const exported = await archive.exportSession(listed[0].id, out);
  assert.equal(exported.outcome, "created");
  const piCopy = await JsonlSessionStorage.open(new NodeExecutionEnv({ cwd: dir }), exported.path);
  assert.deepEqual(await piCopy.getEntries(), await st.getEntries());
  assert.equal((await archive.exportSession(listed[0].id, out)).outcome, "unchanged");
  writeFileSync(exported.path, "something else\n");
  await rejects(archive.exportSession(listed[0].id, out), "storage");
  const forced = await archive.exportSession(listed[0].id, out, { force: true });
  assert.equal(forced.outcome, "replaced");
  assert.equal(readFileSync(forced.backup, "utf8"), "something else\n");
});

test("pi's files and the archive stay consistent: import merges by entry id", async (t) => {
  const dir = tempDir(t);
  const root = join(dir, "sessions");
  const fs = new NodeExecutionEnv({ cwd: dir });
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const piRepo = new JsonlSessionRepo({ fs, sessionsRoot: root });
  const created = await piRepo.create({ cwd: "/w", id: "s1" });
  // pi names the file from a clock read just before the header's: export
  // names it from the header. Renamed to that name, pi's file is the one
  // export writes to (otherwise export writes a file beside it).
  const meta = await created.getMetadata();
  const file = join(dirname(meta.path), `${meta.createdAt.replace(/[:.]/g, "-")}_s1.jsonl`);
  renameSync(meta.path, file);
  const piSession = new Session(await JsonlSessionStorage.open(fs, file));
  await piSession.appendMessage(user("pi 1"));

  // pi writes the file: import brings the archive up to date, appending what pi added.
  assert.equal((await archive.importPiSessions(root)).imported, 1);
  await piSession.appendMessage(user("pi 2"));
  assert.equal((await archive.importPiSessions(root)).appended, 1);

  // Written through the binding, the archive is the session's source of
  // truth: export (into pi's directory) appends the new entries to pi's own
  // file, and import then finds nothing to do.
  let ours = new Session(await archive.storage("s1"));
  await ours.appendMessage(user("binding 1"));
  const exported = await archive.exportSession("s1", root);
  assert.equal(exported.path, file);
  assert.equal(exported.outcome, "appended");
  // (Import writes too: it waits for the binding's writer to close.)
  const blocked = await archive.importPiSessions(root);
  assert.match(blocked.failed[0]?.message ?? "", /already open for writing/);
  await ours.getStorage().close();
  ours = new Session(await archive.storage("s1"));
  const again = await archive.importPiSessions(root);
  assert.equal(again.unchanged, 1, JSON.stringify(again));
  const piView = new Session(await JsonlSessionStorage.open(fs, file));
  assert.deepEqual(
    (await piView.getEntries()).map((e) => e.id),
    (await ours.getEntries()).map((e) => e.id),
  );

  // The archive moves on and pi appends to its (now older) file as well:
  // import merges pi's entry into the archive's session by id.
  await ours.appendMessage(user("binding 2"));
  await ours.getStorage().close();
  await piView.appendMessage(user("pi 3"));
  const merged = await archive.importPiSessions(root);
  assert.equal(merged.failed.length, 0, JSON.stringify(merged));
  assert.equal(merged.appended, 1, JSON.stringify(merged));
  const reader = await archive.storage("s1");
  const texts = (await reader.getEntries()).filter((e) => e.type === "message").map((e) => e.message.content);
  assert.deepEqual(texts, ["pi 1", "pi 2", "binding 1", "binding 2", "pi 3"]);
  // The binding's export writes only over a file the archive's copy extends
  // (the CLI's `export` merges into it: docs/merging.md).
  await assert.rejects(archive.exportSession("s1", root), (e) => e.code === "storage");
  await reader.close();
});

// The team archive through the same `Archive`: opened by URL, each run in a
// schema of its own (`search_path`, created on first use). Skipped without a
// server; CI sets SESSIONTREE_REQUIRE_PG so that a missing one fails.
test("a postgres:// URL opens a team archive with the same API; import is refused there", async (t) => {
  const url = process.env.SESSIONTREE_TEST_PG;
  if (!url) {
    assert.ok(!process.env.SESSIONTREE_REQUIRE_PG, "SESSIONTREE_TEST_PG is required (SESSIONTREE_REQUIRE_PG is set)");
    t.skip("no SESSIONTREE_TEST_PG");
    return;
  }
  const schema = `node_binding_${process.pid}_${Date.now()}`;
  const team = `${url}${url.includes("?") ? "&" : "?"}options=-csearch_path%3D${schema}`;
  const archive = await Archive.open(team, { durability: "relaxed" });
  assert.equal(archive.path, team);
  const repo = archive.repo();
  const session = await repo.create({ cwd: "/team" });
  const u = await session.appendMessage(user("deploy the rocket"));
  const a = await session.appendMessage({ role: "assistant", content: [{ type: "text", text: "launched" }], timestamp: 2 });
  await session.appendLabel(a, "done");
  const meta = await session.getMetadata();
  await session.getStorage().close();
  assert.deepEqual(
    (await repo.list()).map((m) => m.id),
    [meta.id],
  );
  const again = await repo.open(meta);
  assert.deepEqual(
    (await again.getBranch()).slice(0, 2).map((e) => e.id),
    [u, a],
  );
  assert.equal(await again.getLabel(a), "done");
  await again.getStorage().close();
  const hits = await archive.search("rocket");
  assert.deepEqual(
    hits.map((h) => h.entryId),
    [u],
  );
  assert.equal((await archive.stats()).sessions, 1);
  const fork = await repo.fork(meta, { entryId: u, position: "at" });
  assert.deepEqual(
    (await fork.getEntries()).map((e) => e.id),
    [u],
  );
  await fork.getStorage().close();
  await rejects(archive.importPiSessions(fixturesDir), "usage", /local SQLite archive only/);
});

test("extras for pickers and mirrors: importPiFile (only new lines), listSessions, sourceFiles", async (t) => {
  const dir = tempDir(t);
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  const header = (id, at, cwd) => JSON.stringify({ type: "session", version: 3, id, timestamp: at, cwd });
  const message = (id, parentId, at, text) =>
    JSON.stringify({ type: "message", id, parentId, timestamp: at, message: { role: "user", content: text, timestamp: Date.parse(at) } });
  const older = join(dir, "older.jsonl");
  const newer = join(dir, "newer.jsonl");
  writeFileSync(older, `${header("s-older", "2026-01-01T00:00:00.000Z", "/a")}\n${message("e1", null, "2026-01-01T00:00:01.000Z", "first")}\n`);
  writeFileSync(newer, `${header("s-newer", "2026-02-01T00:00:00.000Z", "/b")}\n${message("f1", null, "2026-02-01T00:00:01.000Z", "other")}\n`);
  assert.equal((await archive.importPiFile(older)).outcome, "imported");
  assert.equal((await archive.importPiFile(newer)).outcome, "imported");
  assert.equal((await archive.importPiFile(older)).outcome, "unchanged");
  // pi appends a line (and half of the next): only the complete new line is imported.
  writeFileSync(older, `${readFileSync(older, "utf8")}${message("e2", "e1", "2026-03-01T00:00:00.000Z", "later")}\n{"type":"mess`);
  const appended = await archive.importPiFile(older);
  assert.equal(appended.outcome, "appended");
  assert.equal(appended.entries, 1);
  assert.equal(appended.tornTailLine, 4);

  // Newest activity first: the older session's entry of March beats February.
  const all = await archive.listSessions();
  assert.deepEqual(all.map((s) => s.id), ["s-older", "s-newer"]);
  assert.equal(all[0].lastActiveAt, "2026-03-01T00:00:00.000Z");
  assert.equal(all[0].entryCount, 2);
  assert.equal(all[0].name, null);
  assert.equal(all[0].cwd, "/a");
  assert.equal(all[0].sourceFile, older);
  assert.deepEqual((await archive.listSessions({ limit: 1, offset: 1 })).map((s) => s.id), ["s-newer"]);
  assert.deepEqual((await archive.listSessions({ cwd: "/b" })).map((s) => s.id), ["s-newer"]);
  const named = archive.sessionManager("s-newer");
  named.appendSessionInfo("the newer one");
  named.close();
  assert.deepEqual((await archive.listSessions({ nameContains: "newer" })).map((s) => [s.id, s.name]), [["s-newer", "the newer one"]]);

  // The pi file, while it exists.
  assert.deepEqual(await archive.sourceFiles(["s-older", "s-newer", "s-none"]), { "s-older": older, "s-newer": newer, "s-none": null });
  renameSync(newer, join(dir, "moved.jsonl"));
  assert.deepEqual(await archive.sourceFiles(["s-newer"]), { "s-newer": null });
});
