// Two Node processes writing one session of an archive: the second is
// refused with pi's error shape while the first lives; a writer that closes
// its storage releases the claim; a killed writer's claim is taken over.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { Session } from "@earendil-works/pi-agent-core";
import { Archive, SessionError } from "../index.js";
import { here, tempDir } from "./helpers.mjs";

/** Starts test/writer.mjs; resolves with the child and its first line. */
async function startWriter(db, id) {
  const child = spawn(process.execPath, [join(here, "writer.mjs"), db, id], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const first = await lines.next();
  return { child, lines, first: first.done ? "" : first.value };
}

const user = (text) => ({ role: "user", content: text, timestamp: 1 });

test("a second process is refused; a closed or killed writer's claim passes on", { timeout: 120000 }, async (t) => {
  const dir = tempDir(t);
  const db = join(dir, "a.db");
  const archive = await Archive.open(db, { durability: "relaxed" });
  const created = await archive.repo().create({ cwd: "/w" });
  const id = (await created.getMetadata()).id;
  await created.getStorage().close();

  // Process A writes and holds the claim.
  const a = await startWriter(db, id);
  assert.match(a.first, /^ready \d+$/);
  // This process is refused, with pi's error shape naming the holder...
  const mine = new Session(await archive.storage(id));
  await assert.rejects(mine.appendMessage(user("mine")), (e) => {
    assert.ok(e instanceof SessionError);
    assert.equal(e.code, "storage");
    assert.match(e.message, new RegExp(`already open for writing by process ${a.child.pid}\\b`));
    return true;
  });
  // ...and so is a third process.
  const b = await startWriter(db, id);
  assert.match(b.first, new RegExp(`^refused storage .*process ${a.child.pid}\\b`));
  await once(b.child, "exit");

  // A closes its storage: the claim is released, this process may write.
  a.child.stdin.end();
  assert.equal((await a.lines.next()).value, "closed");
  await once(a.child, "exit");
  await mine.appendMessage(user("after A closed"));
  await mine.getStorage().close();

  // C takes the claim and is killed without closing anything: its claim,
  // held by a process of this host that no longer exists, is taken over at once.
  const c = await startWriter(db, id);
  assert.match(c.first, /^ready \d+$/);
  const again = new Session(await archive.storage(id));
  await assert.rejects(again.appendMessage(user("too early")), (e) => e.code === "storage");
  c.child.kill("SIGKILL");
  await once(c.child, "exit");
  await again.appendMessage(user("after C died"));
  const texts = (await again.getEntries()).filter((e) => e.type === "message").map((e) => e.message.content);
  assert.deepEqual(texts, [`written by ${a.child.pid}`, "after A closed", `written by ${c.child.pid}`, "after C died"]);
  await again.getStorage().close();
});
