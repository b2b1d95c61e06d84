// Shared by the tests: temporary directories, the repository's paths, the
// `sessiontree` CLI (built on first use, release, unless SESSIONTREE_BIN).
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const here = dirname(fileURLToPath(import.meta.url));
export const pkgDir = resolve(here, "..");
export const repoRoot = resolve(pkgDir, "..", "..");
/** Real pi sessions, beside the clone (never copied in). */
export const fixturesDir = resolve(repoRoot, "..", "shared", "fixtures", "pi-sessions");
const targetDir = process.env.CARGO_TARGET_DIR ? resolve(repoRoot, process.env.CARGO_TARGET_DIR) : join(repoRoot, "target");

/** A fresh temporary directory, removed when the test ends. */
export function tempDir(t, prefix = "sessiontree-node-") {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function cargoBin(pkg, bin) {
  const path = join(targetDir, "release", bin);
  const args = ["build", "--quiet", "--release", "-p", pkg, "--bin", bin];
  const built = spawnSync(process.env.CARGO ?? "cargo", args, { cwd: repoRoot, stdio: "inherit" });
  if (built.status !== 0) throw new Error(`cargo ${args.join(" ")} failed`);
  if (!existsSync(path)) throw new Error(`${path} was not built`);
  return path;
}

let cli = null;
/** The `sessiontree` command-line tool. */
export function sessiontreeBin() {
  cli ??= process.env.SESSIONTREE_BIN ?? cargoBin("sessiontree", "sessiontree");
  return cli;
}

let gen = null;
/** The workload generator (`sessiontree-bench`). */
export function generatorBin() {
  gen ??= process.env.SESSIONTREE_GEN_BIN ?? cargoBin("sessiontree-bench", "sessiontree-bench");
  return gen;
}

/** Runs a command to completion; throws with its output if it fails. */
export function run(bin, args, options = {}) {
  const r = spawnSync(bin, args, { encoding: "utf8", maxBuffer: 1 << 28, ...options });
  if (r.status !== 0) {
    throw new Error(`${bin} ${args.join(" ")} failed (${r.status ?? r.signal}):\n${r.stdout}\n${r.stderr}`);
  }
  return r.stdout;
}
