// Times pi's JsonlSessionStorage.open + Session.getBranch / buildContext on one
// session file, the way pi resumes a session, and prints one JSON object.
//
//   node resume.mjs FILE [--repeat N] [--ids ID,ID,...]
//
// Each repetition opens the file afresh (read + parse every line + index), then
// reads the active path (getBranch) and builds the model context
// (buildContext, which walks the path again). With --ids, it also times
// getPathToRootOrCompaction from each of those entries on the last opened
// storage. Peak RSS is VmHWM from /proc/self/status (the whole node process).
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { JsonlSessionStorage, Session } from "@earendil-works/pi-agent-core";
import { NodeExecutionEnv } from "@earendil-works/pi-agent-core/node";

const args = process.argv.slice(2);
const file = args.find((a, i) => !a.startsWith("--") && !(i > 0 && args[i - 1].startsWith("--")));
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
if (!file) {
  console.error("usage: node resume.mjs FILE [--repeat N] [--ids ID,ID,...]");
  process.exit(2);
}
const repeat = Number(opt("--repeat", "5"));
const ids = (opt("--ids", "") || "").split(",").filter(Boolean);

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const vmhwmKb = () => {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
};

const env = new NodeExecutionEnv({ cwd: process.cwd() });
const open = [], branch = [], context = [], resume = [];
let storage, pathLen = 0, messages = 0, entries = 0;
for (let r = 0; r < repeat; r++) {
  const t0 = performance.now();
  storage = await JsonlSessionStorage.open(env, file);
  const t1 = performance.now();
  const session = new Session(storage);
  const path = await session.getBranch();
  const t2 = performance.now();
  const ctx = await session.buildContext();
  const t3 = performance.now();
  open.push(t1 - t0);
  branch.push(t2 - t1);
  context.push(t3 - t2);
  resume.push(t1 - t0 + (t3 - t2));
  pathLen = path.length;
  messages = ctx.messages.length;
  entries = (await storage.getEntries()).length;
}
const pathMs = [];
let pathRows = 0;
for (const id of ids) {
  const t0 = performance.now();
  const p = await storage.getPathToRootOrCompaction(id);
  pathMs.push(performance.now() - t0);
  pathRows += p.length;
}
console.log(
  JSON.stringify({
    implementation: "pi @earendil-works/pi-agent-core 0.83.0",
    node: process.version,
    file,
    entries,
    repeat,
    path_len: pathLen,
    messages,
    open_ms: open,
    branch_ms: branch,
    context_ms: context,
    resume_ms: resume,
    median_open_ms: median(open),
    median_branch_ms: median(branch),
    median_context_ms: median(context),
    median_resume_ms: median(resume),
    path_from_ids: ids.length,
    median_path_ms: pathMs.length ? median(pathMs) : null,
    mean_path_rows: ids.length ? pathRows / ids.length : null,
    vmhwm_kb: vmhwmKb(),
  }),
);
