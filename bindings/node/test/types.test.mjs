// index.d.ts type-checks against pi's own interfaces (test/types.ts, strict).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { pkgDir } from "./helpers.mjs";

test("index.d.ts implements pi's SessionStorage and SessionRepo types", () => {
  const tsc = join(pkgDir, "node_modules", "typescript", "bin", "tsc");
  const args = [tsc, "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022", "--skipLibCheck", join("test", "types.ts")];
  const r = spawnSync(process.execPath, args, { cwd: pkgDir, encoding: "utf8" });
  assert.equal(r.status, 0, `tsc found type errors:\n${r.stdout}${r.stderr}`);
});
