// With pi 1.6 installed instead of pi 0.83 (agent-core 1.x has no Session,
// no SessionError): the package still loads, sessionManager() and storage()
// work, and what needs pi 0.83's SDK says so, naming the pi installed. The
// package is loaded from a copy inside tests/pi16/node_modules, so that it
// resolves @earendil-works/pi-agent-core to pi 1.6's.
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { pathToFileURL } from "node:url";
import { pkgDir, tempDir } from "../helpers.mjs";
import { pi16Modules } from "./pi16.mjs";

async function packageBesidePi16(t) {
  const dir = join(pi16Modules, `.sessiontree-test-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  for (const f of ["index.js", "sessiontree.node", "package.json"]) copyFileSync(join(pkgDir, f), join(dir, f));
  return import(pathToFileURL(join(dir, "index.js")).href);
}

test("with pi 1.6 installed: repo() names the pi it needs, sessionManager() and storage() work", async (t) => {
  const { Archive, SessionError } = await packageBesidePi16(t);
  const dir = tempDir(t, "sessiontree-pi16-");
  const archive = await Archive.open(join(dir, "a.db"), { durability: "relaxed" });
  assert.throws(
    () => archive.repo(),
    (e) => {
      assert.ok(e instanceof SessionError);
      assert.match(e.message, /archive\.repo\(\) needs the Session class of pi's SDK, @earendil-works\/pi-agent-core 0\.83/);
      assert.match(e.message, /the installed @earendil-works\/pi-agent-core 1\.6\.0 has no Session/);
      assert.match(e.message, /archive\.sessionManager\(id\)/);
      return true;
    },
  );
  // The rest needs no pi.
  const manager = archive.createSessionManager(dir);
  const id = manager.appendMessage({ role: "user", content: "hi", timestamp: 1 });
  assert.equal(manager.getLeafId(), id);
  manager.close();
  const storage = await archive.storage(manager.getSessionId());
  assert.deepEqual(
    (await storage.getEntries()).map((e) => e.id),
    [id],
  );
  await storage.close();
  // A repo with the Session class given still works, whatever pi is installed.
  class Session {
    constructor(storage) {
      this.storage = storage;
    }
  }
  const s = await archive.repo({ Session }).create({ cwd: dir });
  assert.ok(s instanceof Session);
  await s.storage.close();
});
