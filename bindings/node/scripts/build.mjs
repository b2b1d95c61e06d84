// Builds the addon (`cargo build --release -p sessiontree-node`) and places
// it beside index.js as `sessiontree.node`. SESSIONTREE_NODE_PROFILE=debug
// builds the debug profile instead; CARGO_TARGET_DIR is honoured.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, renameSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = resolve(here, "..");
const root = resolve(pkg, "..", "..");
const profile = process.env.SESSIONTREE_NODE_PROFILE === "debug" ? "debug" : "release";
const args = ["build", "--quiet", "-p", "sessiontree-node"];
if (profile === "release") args.push("--release");
const built = spawnSync(process.env.CARGO ?? "cargo", args, { cwd: root, stdio: "inherit" });
if (built.status !== 0) {
  console.error(`cargo ${args.join(" ")} failed (${built.status ?? built.signal})`);
  process.exit(1);
}
const target = process.env.CARGO_TARGET_DIR ? resolve(root, process.env.CARGO_TARGET_DIR) : join(root, "target");
const lib = { linux: "libsessiontree_node.so", darwin: "libsessiontree_node.dylib", win32: "sessiontree_node.dll" }[process.platform];
const from = join(target, profile, lib ?? "libsessiontree_node.so");
if (!existsSync(from)) {
  console.error(`the built addon is not at ${from}`);
  process.exit(1);
}
// A copy then a rename: copying onto the file in place would rewrite pages a
// running Node process has mapped (a bench or test using the addon crashes).
const tmp = join(pkg, `.sessiontree.node.${process.pid}`);
copyFileSync(from, tmp);
renameSync(tmp, join(pkg, "sessiontree.node"));
