// The Node example of docs/node.md runs as written: against the CLI's default
// archive and pi's sessions directory (both redirected into a temporary
// directory, the real pi sessions copied in).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fixturesDir, here, repoRoot, tempDir } from "./helpers.mjs";

test("the Node example of docs/node.md runs", (t) => {
  const page = readFileSync(join(repoRoot, "docs", "node.md"), "utf8");
  const block = /<!-- node-example[^>]*-->\n```js\n([\s\S]*?)```/.exec(page);
  assert.ok(block, "no node-example block in docs/node.md");
  const dir = tempDir(t);
  const sessions = join(dir, "pi", "sessions", "--w--");
  mkdirSync(sessions, { recursive: true });
  for (const f of readdirSync(fixturesDir).filter((f) => f.endsWith(".jsonl"))) copyFileSync(join(fixturesDir, f), join(sessions, f));
  // Inside the package, so that `import "sessiontree"` resolves to it.
  const script = join(here, `tmp-readme-${process.pid}.mjs`);
  writeFileSync(script, block[1]);
  t.after(() => rmSync(script, { force: true }));
  const r = spawnSync(process.execPath, [script], {
    encoding: "utf8",
    env: { ...process.env, HOME: dir, XDG_DATA_HOME: join(dir, "data"), PI_CODING_AGENT_DIR: join(dir, "pi") },
  });
  assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout.trim(), /^\d+$/);
  assert.ok(Number(r.stdout) > 1);
  assert.ok(existsSync(join(dir, "data", "sessiontree", "archive.db")));
});
