// archive.sessionManager needs no pi and runs on the package's Node 20 too
// (pi 1.6 itself needs Node 22: test/pi16/ runs it against pi's own manager).
import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { Archive, ArchiveSessionManager } from "../index.js";
import { tempDir } from "./helpers.mjs";

test("sessionManager on Node 20: synchronous writes and reads, leaf in memory, reopened at the last entry", async (t) => {
  const archive = await Archive.open(join(tempDir(t), "a.db"), { durability: "relaxed" });
  const manager = archive.createSessionManager("/w", { id: "s-1" });
  assert.ok(manager instanceof ArchiveSessionManager);
  const u = manager.appendMessage({ role: "user", content: "hello", timestamp: 1 });
  const a = manager.appendMessage({ role: "assistant", content: [{ type: "text", text: "hi" }], provider: "p", model: "m", stopReason: "stop", timestamp: 2 });
  assert.match(u, /^[0-9a-f]{8}$/);
  assert.deepEqual(
    manager.getBranch().map((e) => e.id),
    [u, a],
  );
  manager.branch(u);
  const b = manager.appendMessage({ role: "user", content: "again", timestamp: 3 });
  assert.equal(manager.getEntry(b).parentId, u);
  assert.deepEqual(
    manager.buildSessionContext().messages.map((m) => m.role),
    ["user", "user"],
  );
  assert.equal(manager.getEntry("nope"), undefined);
  manager.close();
  const reopened = archive.sessionManager("s-1");
  assert.equal(reopened.getLeafId(), b);
  assert.equal(reopened.getEntryCount(), 3);
  reopened.close();
});
