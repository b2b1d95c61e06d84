// pi's own SQLite session store (@earendil-works/pi-session-backend-sqlite-node,
// node:sqlite, Node >= 22.19) timed on sessiontree's generated sessions, for
// `sessiontree-bench report --pi`. Every command prints one JSON object.
//
//   node anchor.mjs load FILE DIR --leaf ID        bulk load a pi v3 file into DIR/<id>.sqlite
//   node anchor.mjs resume DIR ID [--repeat N] [--ids ID,...]
//                                                  open + active path + context, path reads
//   node anchor.mjs write DIR ID --op append|leaf_move [--targets ID,...] [--repeat N]
//
// How the generated v3 files enter pi's v4 model (its own public API: Session.mutate +
// commit of entry writes, createBranch; ids kept as they are):
// - message, compaction, branch_summary map to the v4 entry of the same type; a v4
//   compaction carries its kept messages (`retainedTail`), computed here from
//   firstKeptEntryId along the compaction's parent chain;
// - model_change, thinking_level_change, active_tools_change, label, session_info and
//   custom keep their place in the tree as v4 `custom` entries (customType = v3 type),
//   so every backend holds the same rows with the same parents;
// - `leaf` records (sessiontree's movable leaf) have no v4 counterpart and no children:
//   they are dropped, and the session's final leaf becomes the tip of branch "main".
// pi v4 has no leaf to move: the like-for-like "leaf move + append" is createBranch at
// the target entry + one appendMessage on it (how v4 continues from an older entry).
import { readFileSync, statSync, readdirSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { performance } from "node:perf_hooks";

const tStart = performance.now();
const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const positional = args.filter((a, i) => !a.startsWith("--") && !(i > 0 && args[i - 1].startsWith("--")));
const [command, ...rest] = positional;

const median = (xs) => {
  if (!xs.length) return null;
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
const dirBytes = (dir) => readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);

// The module import is timed apart: it is what every fresh pi process pays first.
const tImport0 = performance.now();
const core = await import("@earendil-works/pi-agent-core");
const backend = await import("@earendil-works/pi-session-backend-sqlite-node");
// pi's context builder is not re-exported from the package root; this is its own file.
const ctxModule = await import(
  new URL("./node_modules/@earendil-works/pi-agent-core/dist/harness/session/context.js", import.meta.url)
);
const importMs = performance.now() - tImport0;
const C = core.BACKGROUND_CONTEXT;
const pkg = JSON.parse(
  readFileSync(new URL("./node_modules/@earendil-works/pi-session-backend-sqlite-node/package.json", import.meta.url), "utf8"),
);

const openRepo = (dir) =>
  new backend.SqliteSessionRepo({ directory: dir, databaseFactory: backend.createNodeSqliteFactory() });
const metadataOf = async (repo, id) => {
  const found = (await repo.list(undefined, C)).find((m) => m.id === id);
  if (!found) throw new Error(`no session ${id} in the repository`);
  return found;
};

/// One v3 record as a v4 entry write (without seq/timestamp, which storage assigns).
function toV4(rec, byId) {
  const base = { id: rec.id, parentId: rec.parentId ?? null };
  switch (rec.type) {
    case "message":
      return { ...base, type: "message", message: rec.message };
    case "branch_summary":
      return { ...base, type: "branch_summary", fromId: rec.fromId === "root" ? null : (rec.fromId ?? null), summary: rec.summary, fromHook: !!rec.fromHook, ...(rec.details === undefined ? {} : { details: rec.details }) };
    case "compaction": {
      const tail = [];
      let cur = rec.parentId;
      while (cur != null) {
        const e = byId.get(cur);
        if (!e) break;
        if (e.type === "message") tail.push(e.message);
        if (cur === rec.firstKeptEntryId) break;
        cur = e.parentId;
      }
      tail.reverse();
      return { ...base, type: "compaction", summary: rec.summary, retainedTail: tail, tokensBefore: rec.tokensBefore ?? 0, fromHook: !!rec.fromHook, ...(rec.details === undefined ? {} : { details: rec.details }) };
    }
    default:
      return { ...base, type: "custom", customType: rec.type, data: rec };
  }
}

async function load(file, dir, leaf) {
  mkdirSync(dir, { recursive: true });
  const bytes = statSync(file).size;
  const t0 = performance.now();
  const lines = readFileSync(file, "utf8").split("\n");
  const header = JSON.parse(lines[0]);
  const byId = new Map();
  const writes = [];
  for (let i = 1; i < lines.length; i++) {
    if (!lines[i]) continue;
    const rec = JSON.parse(lines[i]);
    if (rec.type === "leaf") continue;
    byId.set(rec.id, rec);
    writes.push({ kind: "entry", entry: toV4(rec, byId) });
  }
  const t1 = performance.now();
  const repo = openRepo(dir);
  const session = await repo.create({ id: header.id }, C);
  const batch = Number(opt("--batch", "1000"));
  for (let i = 0; i < writes.length; i += batch) {
    await session.mutate((m) => m.commit(writes.slice(i, i + batch), C), C);
  }
  await session.createBranch("main", leaf, C);
  await session.close(C);
  await repo.close(C);
  const t2 = performance.now();
  return {
    entries: writes.length, jsonl_bytes: bytes, parse_ms: t1 - t0, commit_ms: t2 - t1, load_ms: t2 - t0,
    batch, mb_per_s: bytes / 1e6 / ((t2 - t0) / 1e3), store_bytes: dirBytes(dir), vmhwm_kb: vmhwmKb(),
  };
}

/// A resume as pi v4 does it: open the session, read branch main's tip, scan its
/// path back to the nearest compaction, build the model context. The scan goes
/// newest first (its default): with `order: "oldestFirst"` pi's scan starts from
/// the root and stops at the first compaction there, another cursor entirely.
async function resumeOnce(dir, id) {
  const t0 = performance.now();
  const repo = openRepo(dir);
  const session = await repo.open(await metadataOf(repo, id), C);
  const t1 = performance.now();
  const tip = await (await session.branch("main", C)).getTipId(C);
  const path = (await session.scanBranch({ start: tip, stopAtType: "compaction" }, C)).reverse();
  const t2 = performance.now();
  const messages = await ctxModule.buildSessionContext(path, undefined, C);
  const t3 = performance.now();
  return { repo, session, open: t1 - t0, branch: t2 - t1, context: t3 - t2, total: t3 - t0, pathLen: path.length, messages: messages.length };
}

async function resume(dir, id) {
  const repeat = Number(opt("--repeat", "5"));
  const ids = (opt("--ids", "") || "").split(",").filter(Boolean);
  const open = [], branch = [], context = [], total = [];
  let last;
  for (let r = 0; r < repeat; r++) {
    if (last) {
      await last.session.close(C);
      await last.repo.close(C);
    }
    last = await resumeOnce(dir, id);
    open.push(last.open);
    branch.push(last.branch);
    context.push(last.context);
    total.push(last.total);
  }
  const pathMs = [];
  let pathRows = 0;
  for (const start of ids) {
    const t0 = performance.now();
    const p = (await last.session.scanBranch({ start, stopAtType: "compaction" }, C)).reverse();
    pathMs.push(performance.now() - t0);
    pathRows += p.length;
  }
  await last.session.close(C);
  await last.repo.close(C);
  return {
    repeat, path_len: last.pathLen, messages: last.messages,
    open_ms: open, branch_ms: branch, context_ms: context, resume_ms: total,
    median_open_ms: median(open), median_branch_ms: median(branch), median_context_ms: median(context), median_resume_ms: median(total),
    path_from_ids: ids.length, path_ms: pathMs, median_path_ms: median(pathMs), mean_path_rows: ids.length ? pathRows / ids.length : null,
    vmhwm_kb: vmhwmKb(),
  };
}

const message = (i) => ({
  role: "user",
  content: [{ type: "text", text: `bench append ${i}: ` + "lorem ipsum dolor sit amet ".repeat(32) }],
  timestamp: Date.now(),
});

async function write(dir, id) {
  const op = opt("--op", "append");
  const repeat = Number(opt("--repeat", "5"));
  const targets = (opt("--targets", "") || "").split(",").filter(Boolean);
  const repo = openRepo(dir);
  const session = await repo.open(await metadataOf(repo, id), C);
  const main = await session.branch("main", C);
  const ms = [];
  // One warm-up, as the Rust side's measure() does.
  for (let r = 0; r <= repeat; r++) {
    const t0 = performance.now();
    if (op === "append") {
      await main.appendMessage(message(r), C);
    } else {
      const at = targets[r % targets.length];
      const b = await session.createBranch(`bench-${process.pid}-${r}`, at, C);
      await b.appendMessage(message(r), C);
    }
    if (r > 0) ms.push(performance.now() - t0);
  }
  await session.close(C);
  await repo.close(C);
  return { op, repeat, ms, median_ms: median(ms), vmhwm_kb: vmhwmKb() };
}

let result;
if (command === "load" && rest.length === 2) result = await load(rest[0], rest[1], opt("--leaf", null));
else if (command === "resume" && rest.length === 2) result = await resume(rest[0], rest[1]);
else if (command === "write" && rest.length === 2) result = await write(rest[0], rest[1]);
else {
  console.error("usage: node anchor.mjs load FILE DIR --leaf ID | resume DIR ID [--repeat N] [--ids ...] | write DIR ID --op append|leaf_move [--targets ...]");
  process.exit(2);
}
console.log(JSON.stringify({
  implementation: `pi ${pkg.name} ${pkg.version}`, node: process.version, command,
  import_ms: importMs, process_ms: performance.now() - tStart, ...result,
}));
