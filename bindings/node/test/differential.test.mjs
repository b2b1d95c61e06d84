// pi's own Session (pi-agent-core 0.83.0) over this binding's ArchiveStorage
// against pi's Session over pi's JsonlSessionStorage (and InMemorySessionStorage):
// the repository's differential generator (tests/differential/run.mjs,
// backend `node`) replays its sequences on both and compares every answer,
// then the files each side wrote as the other reads them.
// DIFF_SEQUENCES (default 250) and the harness's other knobs pass through.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { generatorBin, pkgDir, repoRoot, sessiontreeBin } from "./helpers.mjs";

const harness = join(repoRoot, "tests", "differential");

function ensureHarnessInstalled() {
  if (existsSync(join(harness, "node_modules", "@earendil-works", "pi-agent-core", "package.json"))) return;
  const r = spawnSync("npm", ["install", "--no-audit", "--no-fund", "--ignore-scripts"], { cwd: harness, encoding: "utf8" });
  assert.equal(r.status, 0, `npm install in ${harness} failed:\n${r.stdout}\n${r.stderr}`);
}

test("pi's Session over the binding answers as over pi's own storages", { timeout: 15 * 60 * 1000 }, () => {
  ensureHarnessInstalled();
  const sequences = process.env.DIFF_SEQUENCES ?? "250";
  const r = spawnSync(
    process.execPath,
    [join(harness, "run.mjs"), "--bin", sessiontreeBin(), "--gen-bin", generatorBin(), "--backends", "node", "--binding", join(pkgDir, "index.js")],
    {
      cwd: repoRoot,
      encoding: "utf8",
      maxBuffer: 1 << 28,
      env: { ...process.env, TZ: "UTC", DIFF_SEQUENCES: sequences, DIFF_JOBS: process.env.DIFF_JOBS ?? "4" },
    },
  );
  const summary = r.stdout
    .split("\n")
    .filter((l) => /^(differential:|MISMATCH|HARNESS|  node:)/.test(l))
    .join("\n");
  console.log(summary);
  assert.equal(r.status, 0, `the differential run failed:\n${r.stdout.slice(-20000)}\n${r.stderr.slice(-5000)}`);
  const counted = r.stdout.match(/node: (\d+) sequences, (\d+) operations compared, 0 mismatching sequences/);
  assert.ok(counted, `no per-backend summary in:\n${summary}`);
  assert.ok(Number(counted[1]) >= Number(sequences), `only ${counted[1]} sequences ran`);
});
