// index.d.ts type-checks against pi 1.6's own types (test/pi16/types.ts,
// strict; pi-coding-agent 1.6.0 from tests/pi16, pi 0.83 from this package).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { pkgDir } from "../helpers.mjs";

test("index.d.ts: sessionManager() is pi 1.6's SessionManager, storage() pi 0.83's SessionStorage", () => {
  const tsc = join(pkgDir, "node_modules", "typescript", "bin", "tsc");
  const r = spawnSync(process.execPath, [tsc, "-p", join("test", "pi16", "tsconfig.json")], { cwd: pkgDir, encoding: "utf8" });
  assert.equal(r.status, 0, `tsc found type errors:\n${r.stdout}${r.stderr}`);
});
