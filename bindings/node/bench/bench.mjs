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
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { JsonlSessionStorage, Session } from "@earendil-works/pi-agent-core";
import { NodeExecutionEnv } from "@earendil-works/pi-agent-core/node";
import { Archive, JsonlStorage } from "../index.js";
import { generatorBin, run } from "../test/helpers.mjs";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const sizes = opt("--entries", "10000,100000").split(",").map(Number);
const repeat = Number(opt("--repeat", "5"));
const nPaths = Number(opt("--paths", "200"));
const nMoves = Number(opt("--moves", "200"));

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
        const t1 = performance.now();
        for (const mid of moveIds) {
          await st.setLeafId(mid);
          await session.appendMessage({ role: "user", content: "one more question", timestamp: 1 });
        }
        const label = name === "pi-jsonl" ? name : `${name} (${durability})`;
        rows.push({ size, op: "move+append", side: label, ms: (performance.now() - t1) / moveIds.length, note: `${moveIds.length} moves, each followed by an append` });
        await st.close?.();
      }
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (args.includes("--json")) {
  console.log(JSON.stringify({ node: process.version, repeat, paths: nPaths, moves: nMoves, rows }, null, 1));
} else {
  console.log(`Node ${process.version}; forked sessions from sessiontree-bench gen; median of ${repeat} resumes, mean over ${nPaths} paths and ${nMoves} move+append pairs\n`);
  console.log("| entries | operation | storage | ms | |");
  console.log("|---:|---|---|---:|---|");
  for (const r of rows) console.log(`| ${r.size.toLocaleString("en")} | ${r.op} | ${r.side} | ${r.ms.toFixed(r.ms < 1 ? 3 : 1)} | ${r.note} |`);
}
