// pi 1.6 beside the Node binding, in process, for `sessiontree-bench report`
// (benches/src/pi16.rs runs it under the Node 22 that tests/pi16 installs).
// Prints one JSON value: per side, the samples in milliseconds.
//
//   node bench.mjs session --file F --archive DB --id ID --repeat N --branch-ids a,b
//     pi:      SessionManager.open(F) + buildSessionContext(); getBranch(); branch(x) + appendMessage
//     binding: Archive.open(DB) + sessionManager(ID) + buildSessionContext(); the same reads and writes
//              (the writes twice: at the default durability, Full, and at Relaxed, no fsync, as pi's)
//   node bench.mjs read --archive DB --id ID --repeat N
//     binding: getBranch() of the whole active path, and JSON.parse of its text (the floor)
//   node bench.mjs list --agent-dir D --archive DB --repeat N
//     pi:      SessionManager.listAll() with PI_CODING_AGENT_DIR=D (the /resume picker, all projects)
//     binding: archive.repo().list() (every session's metadata)
//
// F and DB must be copies: the writes land in them.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "..", "..");
const piEntry = join(root, "tests", "pi16", "node_modules", "@earendil-works", "pi-coding-agent", "dist", "index.js");
const bindingEntry = join(root, "bindings", "node", "index.js");

function args() {
  const out = { cmd: process.argv[2] };
  for (let i = 3; i < process.argv.length; i += 2) {
    out[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
  }
  return out;
}

function time(f) {
  const t = process.hrtime.bigint();
  const v = f();
  return [Number(process.hrtime.bigint() - t) / 1e6, v];
}

async function timeAsync(f) {
  const t = process.hrtime.bigint();
  const v = await f();
  return [Number(process.hrtime.bigint() - t) / 1e6, v];
}

function message(i) {
  return { role: "user", content: `bench append ${i}: what does the checkpoint migration do?`, timestamp: Date.now() };
}

/** `reps` timings of `f`, one untimed call first; the last value. */
function samples(reps, f) {
  let value = f();
  const ms = [];
  for (let i = 0; i < reps; i++) {
    const [t, v] = time(f);
    ms.push(t);
    value = v;
  }
  return [ms, value];
}

async function session(a) {
  const reps = Number(a.repeat ?? 5);
  const branchIds = (a["branch-ids"] ?? "").split(",").filter(Boolean);
  const reads = Number(a.reads ?? 20);
  const [importPi] = await timeAsync(() => import(pathToFileURL(piEntry).href));
  const { SessionManager } = await import(pathToFileURL(piEntry).href);
  const out = { import_ms: { pi: importPi } };

  // pi 1.6: the whole file is parsed on open.
  const [resume, ctx] = samples(reps, () => SessionManager.open(a.file).buildSessionContext());
  const sm = SessionManager.open(a.file);
  const [branch, path] = samples(reads, () => sm.getBranch());
  const writes = [];
  for (let i = 0; i < branchIds.length; i++) {
    const [t] = time(() => {
      sm.branch(branchIds[i]);
      sm.appendMessage(message(i));
    });
    writes.push(t);
  }
  out.pi = { resume, getBranch: branch, branchAppend: writes, messages: ctx.messages.length, branchLen: path.length };

  // The binding: nothing but the answer is read.
  const [importBinding] = await timeAsync(() => import(pathToFileURL(bindingEntry).href));
  out.import_ms.binding = importBinding;
  const { Archive } = await import(pathToFileURL(bindingEntry).href);
  const open = [];
  let bctx;
  for (let i = 0; i <= reps; i++) {
    const [t, v] = await timeAsync(async () => {
      const archive = await Archive.open(a.archive);
      const m = archive.sessionManager(a.id);
      const c = m.buildSessionContext();
      m.close?.();
      await archive.close?.();
      return c;
    });
    if (i > 0) open.push(t);
    bctx = v;
  }
  const archive = await Archive.open(a.archive);
  const m = archive.sessionManager(a.id);
  const [bbranch, bpath] = samples(reads, () => m.getBranch());
  const bwrites = [];
  for (let i = 0; i < branchIds.length; i++) {
    const [t] = time(() => {
      m.branch(branchIds[i]);
      m.appendMessage(message(i));
    });
    bwrites.push(t);
  }
  m.close?.();
  await archive.close?.();
  // Like for like with pi's appendFileSync (no fsync): the archive at its
  // Relaxed durability (docs/durability.md), the same branches and appends.
  const relaxed = await Archive.open(a.archive, { durability: "relaxed" });
  const rm = relaxed.sessionManager(a.id);
  const rwrites = [];
  for (let i = 0; i < branchIds.length; i++) {
    const [t] = time(() => {
      rm.branch(branchIds[i]);
      rm.appendMessage(message(i));
    });
    rwrites.push(t);
  }
  rm.close?.();
  await relaxed.close?.();
  out.binding = {
    resume: open,
    getBranch: bbranch,
    branchAppend: bwrites,
    branchAppendRelaxed: rwrites,
    messages: bctx.messages.length,
    branchLen: bpath.length,
  };
  return out;
}

// The binding's read path against its floor: getBranch through
// archive.sessionManager(id), and JSON.parse of the same answer's text.
async function read(a) {
  const reps = Number(a.repeat ?? 10);
  const { Archive } = await import(pathToFileURL(bindingEntry).href);
  const archive = await Archive.open(a.archive);
  const m = archive.sessionManager(a.id);
  const [call, branch] = samples(reps, () => m.getBranch());
  const text = JSON.stringify(branch);
  const [parse] = samples(reps, () => JSON.parse(text));
  m.close?.();
  return { binding: { getBranch: call, parse, entries: branch.length, bytes: Buffer.byteLength(text) } };
}

async function list(a) {
  const reps = Number(a.repeat ?? 3);
  process.env.PI_CODING_AGENT_DIR = a["agent-dir"];
  const { SessionManager } = await import(pathToFileURL(piEntry).href);
  const pi = [];
  let n = 0;
  for (let i = 0; i <= reps; i++) {
    const [t, v] = await timeAsync(() => SessionManager.listAll());
    if (i > 0) pi.push(t);
    n = v.length;
  }
  const { Archive } = await import(pathToFileURL(bindingEntry).href);
  const archive = await Archive.open(a.archive);
  const repo = archive.repo();
  const binding = [];
  let bn = 0;
  for (let i = 0; i <= reps; i++) {
    const [t, v] = await timeAsync(() => repo.list());
    if (i > 0) binding.push(t);
    bn = v.length;
  }
  await archive.close?.();
  return { pi: { listAll: pi, sessions: n }, binding: { list: binding, sessions: bn } };
}

const a = args();
const run = { session, list, read }[a.cmd];
if (!run) {
  console.error(`usage: bench.mjs session|list …`);
  process.exit(2);
}
const result = await run(a);
result.node = process.version;
process.stdout.write(`${JSON.stringify(result)}\n`);
