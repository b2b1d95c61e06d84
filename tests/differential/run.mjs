#!/usr/bin/env node
// Differential test: `sessiontree rpc` against pi's reference session storage
// (@earendil-works/pi-agent-core 0.83.0).
//
//   node tests/differential/run.mjs --bin target/debug/sessiontree [options]
//
// Options (each also as an environment variable):
//   --bin PATH            sessiontree binary            (SESSIONTREE_BIN)
//   --gen-bin PATH        sessiontree-bench binary, the workload generator for --gen
//                         (SESSIONTREE_GEN_BIN; without it --gen is 0)
//   --sequences N         sequences per backend, 250    (DIFF_SEQUENCES; postgres:
//                         DIFF_PG_SEQUENCES, default 120)
//   --seed N              base seed, 20250101           (DIFF_SEED; "random" for a fresh one)
//   --backends LIST       jsonl,memory,sqlite[,postgres] (DIFF_BACKENDS; postgres
//                         by default when SESSIONTREE_TEST_PG names a server:
//                         each sequence in its own schema, imported with
//                         `sessiontree sync --to`; also: node, pi's Session over
//                         the Node binding's archive storage, needs bindings/node built)
//   --binding PATH        the Node binding's index.js   (DIFF_BINDING)
//   --min-ops N/--max-ops N  ops per sequence, 10..40   (DIFF_MIN_OPS, DIFF_MAX_OPS)
//   --long F              fraction of long sequences (max-ops..5×max-ops ops), 0.05 (DIFF_LONG)
//   --real F              fraction of sequences starting from a window of a real pi
//                         session in ../shared/fixtures/pi-sessions, 0.1 (DIFF_REAL;
//                         the folder: DIFF_FIXTURES)
//   --gen F               fraction of the other sequences starting from a session written by
//                         `sessiontree-bench gen` (every --shape, 20-200 entries, compactions every
//                         4-60 entries or none; seeds from the sequence seed), 0.1 (DIFF_GEN)
//   --jobs N              sequences in parallel, 2      (DIFF_JOBS)
//   --exotic LIST         exotic input categories (DIFF_EXOTIC): "default" (all but the
//                         known mismatches below), "all", "none", or a comma list of
//                         surrogate-text,surrogate-labels,dates,v8-dates,types,
//                         blank-head,blank-head-import,sqlite-late-parent (see lib/gen.mjs)
//   --durability MODE     relaxed|full, relaxed         (DIFF_DURABILITY)
//   --seq-seed HEX        run only this one sequence (as printed on failure), with --backends
//   --no-shrink           do not minimise failing sequences (DIFF_NO_SHRINK=1)
//   --verbose             print every operation and answer
//   --keep                keep temporary directories
//   --coverage            print how often each method answered ok / each error code (DIFF_COVERAGE=1)

import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Rng, mixSeed } from "./lib/prng.mjs";
import { Generator, makeSnapshot, ENTRY_TYPES, EXOTIC_CATEGORIES } from "./lib/gen.mjs";
import { makeHeader, makePrefixEntries, realPrefixEntries, realFixtureCount, FIXTURE_DIR, renderFile, generatedPrefixEntries, GEN_SHAPES } from "./lib/prefix.mjs";
import { BindingSide, FailedSide, PiSide, RpcSide, runOnce } from "./lib/sides.mjs";
import { Clock, compareAnswers, normalizeAnswer, normalizeMessage } from "./lib/compare.mjs";
import { ExoticCategories, describe, hex, pgUrl as schemaUrl, pool, report, show, shrink, summaryLine } from "./lib/harness.mjs";

// Local-time date strings are parsed by JavaScript in the process time zone;
// the contract's reading is UTC.
process.env.TZ = "UTC";

// ---------------------------------------------------------------- config

// Exotic categories left out by default because sessiontree differs from pi
// there on purpose: each is a row of docs/contract.md's table of deliberate
// differences. DIFF_EXOTIC=all shows them.
const KNOWN_MISMATCH_CATEGORIES = {
  "v8-dates": "deliberate: V8's implementation-defined legacy Date parsing (Feb 30, +0530, \"Mar 1 2023\") is read as no date",
  "sqlite-late-parent": "sqlite refuses (invalid_entry) an entry whose id is the missing parent of entries already stored",
};

const EXOTIC = new ExoticCategories("differential", EXOTIC_CATEGORIES, KNOWN_MISMATCH_CATEGORIES);

function parseArgs(argv) {
  const env = process.env;
  const cfg = {
    bin: env.SESSIONTREE_BIN,
    genBin: env.SESSIONTREE_GEN_BIN,
    binding: env.DIFF_BINDING ?? fileURLToPath(new URL("../../bindings/node/index.js", import.meta.url)),
    sequences: Number(env.DIFF_SEQUENCES ?? 250),
    // A team archive's sequence costs several server round trips per
    // operation: fewer of them by default, so CI stays within its budget.
    pgSequences: Number(env.DIFF_PG_SEQUENCES ?? env.DIFF_SEQUENCES ?? 120),
    seed: env.DIFF_SEED ?? "20250101",
    backends: (env.DIFF_BACKENDS ?? (env.SESSIONTREE_TEST_PG ? "jsonl,memory,sqlite,postgres" : "jsonl,memory,sqlite")).split(","),
    minOps: Number(env.DIFF_MIN_OPS ?? 10),
    maxOps: Number(env.DIFF_MAX_OPS ?? 40),
    longFraction: Number(env.DIFF_LONG ?? 0.05),
    realFraction: Number(env.DIFF_REAL ?? 0.1),
    genFraction: Number(env.DIFF_GEN ?? 0.1),
    jobs: Number(env.DIFF_JOBS ?? 2),
    exotic: EXOTIC.parse(env.DIFF_EXOTIC ?? "default"),
    durability: env.DIFF_DURABILITY ?? "relaxed",
    seqSeed: null,
    shrink: env.DIFF_NO_SHRINK !== "1",
    verbose: env.DIFF_VERBOSE === "1",
    keep: env.DIFF_KEEP === "1",
    coverage: env.DIFF_COVERAGE === "1",
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const val = () => argv[++i];
    switch (a) {
      case "--bin": cfg.bin = val(); break;
      case "--gen-bin": cfg.genBin = val(); break;
      case "--binding": cfg.binding = val(); break;
      case "--sequences": cfg.sequences = Number(val()); break;
      case "--seed": cfg.seed = val(); break;
      case "--backends": cfg.backends = val().split(","); break;
      case "--min-ops": cfg.minOps = Number(val()); break;
      case "--max-ops": cfg.maxOps = Number(val()); break;
      case "--long": cfg.longFraction = Number(val()); break;
      case "--real": cfg.realFraction = Number(val()); break;
      case "--gen": cfg.genFraction = Number(val()); break;
      case "--jobs": cfg.jobs = Number(val()); break;
      case "--exotic": cfg.exotic = EXOTIC.parse(val()); break;
      case "--durability": cfg.durability = val(); break;
      case "--seq-seed": cfg.seqSeed = parseInt(val(), 16) >>> 0; break;
      case "--no-shrink": cfg.shrink = false; break;
      case "--verbose": cfg.verbose = true; break;
      case "--keep": cfg.keep = true; break;
      case "--coverage": cfg.coverage = true; break;
      default:
        console.error(`unknown argument ${a}`);
        process.exit(2);
    }
  }
  if (cfg.seed === "random") cfg.seed = String((Math.random() * 2 ** 32) >>> 0);
  cfg.seed = Number(cfg.seed) >>> 0;
  if (!cfg.bin) {
    console.error("differential: no sessiontree binary (--bin or SESSIONTREE_BIN)");
    process.exit(2);
  }
  cfg.bin = resolve(cfg.bin);
  if (!cfg.genBin) {
    if (cfg.genFraction > 0) console.error("differential: no generator (--gen-bin or SESSIONTREE_GEN_BIN); no sequence starts from a generated session");
    cfg.genFraction = 0;
  } else {
    cfg.genBin = resolve(cfg.genBin);
  }
  if (!existsSync(cfg.bin)) {
    console.error(`differential: ${cfg.bin} does not exist (cargo build first)`);
    process.exit(2);
  }
  for (const b of cfg.backends) {
    if (!["jsonl", "memory", "sqlite", "postgres", "node"].includes(b)) {
      console.error(`differential: unknown backend ${b}`);
      process.exit(2);
    }
  }
  if (cfg.backends.includes("postgres") && !env.SESSIONTREE_TEST_PG) {
    console.error("differential: the postgres backend needs SESSIONTREE_TEST_PG (a server URL)");
    process.exit(2);
  }
  return cfg;
}

const cfg = parseArgs(process.argv);
const clock = new Clock();
const BACKEND_INDEX = { jsonl: 1, memory: 2, sqlite: 3, postgres: 4, node: 5 };

/** Whether `backend` is an archive (sqlite, postgres, node: the binding over a SQLite archive): imported, exported, no file path, unique ids. */
const isArchive = (backend) => backend === "sqlite" || backend === "postgres" || backend === "node";

/** The team archive of sequence directory `dir` (`name`): its own schema of the test server. */
const pgUrl = (dir, name) => schemaUrl("d", dir, name);

/** Where `backend` keeps the archive `name` of sequence directory `dir`. */
function archiveDb(backend, dir, name) {
  return backend === "postgres" ? pgUrl(dir, name) : join(dir, `${name}.db`);
}

/** Whether a side is ours (the rpc, or pi's Session over the Node binding). */
const isOursSide = (side) => side instanceof RpcSide || side instanceof BindingSide;

let binding = null;
async function loadBinding() {
  binding ??= await import(pathToFileURL(resolve(cfg.binding)).href);
  return binding;
}

// Methods whose value is an id the implementation generated.
const GENERATES_ID = new Set([
  "createEntryId",
  "appendMessage",
  "appendThinkingLevelChange",
  "appendModelChange",
  "appendActiveToolsChange",
  "appendCompaction",
  "appendCustomEntry",
  "appendCustomMessageEntry",
  "appendLabel",
  "appendSessionName",
  "moveTo",
]);

// ---------------------------------------------------------------- sqlite hook

let realSequences = 0;
const genSequences = new Map(); // shape -> sequences started from `sessiontree gen` output
let sqliteImport = null; // null = unknown, true/false after detection

async function detectSqliteImport() {
  const help = await runOnce(cfg.bin, ["--help"]);
  // The sqlite backend needs `sessiontree --db A.db import FILE.jsonl`.
  return /^\s+import\b/m.test(help.stdout);
}

async function importIntoArchive(backend, dir, file, name) {
  const db = archiveDb(backend, dir, name);
  const args =
    backend === "postgres"
      ? ["--durability", cfg.durability, "sync", "--to", db, file]
      : ["--db", db, "--durability", cfg.durability, "import", file];
  const r = await runOnce(cfg.bin, args);
  return { db, ...r };
}

// ---------------------------------------------------------------- sides

function oursArgs(backend, source, db) {
  const dur = ["--durability", cfg.durability];
  if (isArchive(backend)) return ["--db", db, ...dur, "rpc", source];
  if (backend === "memory") return [...dur, "rpc", "--backend", "memory", source];
  return [...dur, "rpc", source];
}

/** Starts `sessiontree rpc` for `file` on `backend`; for sqlite imports the file first. */
async function startOurs(kind, backend, dir, file, sessionId, dbName) {
  if (backend === "node") {
    // The binding imports the file itself (as `sessiontree import` does).
    const db = join(dir, `${dbName}.db`);
    try {
      const { Archive } = await loadBinding();
      const archive = await Archive.open(db, { durability: cfg.durability });
      const imported = await archive.importPiSessions(file);
      if (imported.imported !== 1) return { error: `the binding's import of ${file}: ${JSON.stringify(imported)}` };
      return { side: await BindingSide.open(archive, `${kind}(node)`, sessionId) };
    } catch (e) {
      return { error: `the Node binding could not import ${file} into ${db}: ${e.stack ?? e}` };
    }
  }
  if (isArchive(backend)) {
    const imp = await importIntoArchive(backend, dir, file, dbName);
    if (imp.status !== 0) {
      return { error: `sessiontree import ${file} failed (status ${imp.status}): ${imp.stderr.trim() || imp.stdout.trim()}` };
    }
    return { side: new RpcSide(kind, cfg.bin, oursArgs(backend, sessionId, imp.db), { path: null }) };
  }
  return { side: new RpcSide(kind, cfg.bin, oursArgs(backend, file), { path: file }) };
}

// ---------------------------------------------------------------- one sequence

function snapshotOf(piSide, created) {
  const ids = piSide.ids;
  const entries = piSide.rawEntries().map((e) => ({
    cid: ids.canon(e.id),
    type: e.type,
    parent: e.parentId === null || e.parentId === undefined ? null : ids.canon(e.parentId),
    role: e.type === "message" && e.message && typeof e.message === "object" ? e.message.role : undefined,
  }));
  const leaf = piSide.rawLeaf();
  const snap = makeSnapshot(entries, leaf === null || leaf === undefined ? null : ids.canon(leaf), []);
  snap.pending = [...created].filter((c) => !snap.byId.has(c));
  return snap;
}

/** Compares the metadata of pi and ours; sqlite keeps no file path. */
function adjustMetadata(method, ref, got, backend) {
  if (method !== "getMetadata" || !isArchive(backend) || !ref.ok || !got.ok) return [ref, got];
  const strip = (v) => {
    if (!v || typeof v !== "object") return v;
    const { path, ...rest } = v;
    return rest;
  };
  return [{ ok: true, value: strip(ref.value) }, { ok: true, value: strip(got.value) }];
}

class SequenceRun {
  constructor(spec) {
    this.spec = spec;
    this.backend = spec.backend;
    this.compared = 0;
    this.log = [];
    this.mismatch = null;
    this.harnessError = null;
    this.created = new Set();
    this.executed = [];
    this.coverage = new Map();
    this.idDeltas = [];
  }

  fail(m) {
    if (!this.mismatch) this.mismatch = m;
  }

  async compare(label, op, sides, answers, { now = true, refIndex = 0 } = {}) {
    const norm = answers.map((a, i) => normalizeAnswer(a, sides[i], clock, { now }));
    if (cfg.verbose) {
      this.log.push(`${label} ${op.method} ${show(op.params)}`);
      norm.forEach((n, i) => this.log.push(`    ${sides[i].kind}: ${show(n)}`));
    }
    // The pi sides must agree with each other (else the harness is wrong).
    const ref = norm[refIndex];
    for (let i = 0; i < sides.length; i++) {
      if (i === refIndex) continue;
      const isOurs = isOursSide(sides[i]);
      if (isOurs) {
        this.compared += 1;
        const key = `${op.method} ${ref.ok ? "ok" : ref.error.code}`;
        this.coverage.set(key, (this.coverage.get(key) ?? 0) + 1);
      }
      const [r, g] = adjustMetadata(op.method, ref, norm[i], isOurs ? this.backend : "pi");
      if (!isOurs && op.method === "getMetadata") continue;
      const diff = compareAnswers(op.method, r, g);
      if (ref.ok === false && String(ref.error.code).startsWith("pi-crash")) {
        this.harnessError = `pi crashed on ${label} ${op.method}: ${ref.error.message} (generator should avoid this)`;
      }
      if (diff) {
        this.fail({
          label,
          op,
          kind: isOurs ? diff.kind : `reference-disagreement:${diff.kind}`,
          refSide: sides[refIndex].kind,
          side: sides[i].kind,
          ref: r,
          got: g,
          detail: diff.detail,
        });
        return false;
      }
    }
    return true;
  }

  async run() {
    const { spec } = this;
    const dir = mkdtempSync(join(tmpdir(), "sessiontree-diff-"));
    this.dir = dir;
    const sides = [];
    try {
      const start = join(dir, "start.jsonl");
      writeFileSync(start, spec.pieces.join(""));
      const piPath = join(dir, "pi.jsonl");
      const oursPath = join(dir, "ours.jsonl");
      copyFileSync(start, piPath);
      copyFileSync(start, oursPath);

      let piJ;
      let piM;
      try {
        piJ = await PiSide.openJsonl(piPath);
        piM = await PiSide.openMemory(start);
      } catch (e) {
        this.harnessError = `pi cannot open the starting file: ${e.message}`;
        return this;
      }
      const started = await startOurs("ours", this.backend, dir, oursPath, spec.header.id, "archive");
      if (started.error) {
        this.fail({ label: "import", op: { method: "import", params: {} }, kind: "import-failed", ref: { ok: true }, got: { ok: false, error: { code: "import", message: started.error } }, detail: null });
        return this;
      }
      const ours = started.side;
      this.ours = ours;
      const all = [piJ, piM, ours];
      sides.push(piJ, piM, ours);
      const refIndex = this.backend === "memory" ? 1 : 0;

      const gen = spec.gen;
      const nOps = spec.ops ? spec.ops.length : spec.nOps;
      for (let k = 0; k < nOps && !this.mismatch; k++) {
        const snap = snapshotOf(piJ, this.created);
        const op = spec.ops ? spec.ops[k] : JSON.parse(JSON.stringify(gen.next(snap)));
        this.executed.push(op);
        const idsBefore = piJ.ids.n;
        await this.step(`#${k}`, op, all, refIndex, piJ);
        this.idDeltas.push(piJ.ids.n - idsBefore);
      }
      if (!this.mismatch && !spec.noCross) await this.crossChecks(dir, piJ, ours, new Rng(mixSeed(spec.seed, 0xc0ffee)));
    } catch (e) {
      this.harnessError = `harness exception: ${e.stack ?? e}`;
    } finally {
      for (const s of sides) await s.close();
      if (!cfg.keep && !this.mismatch && !this.harnessError) rmSync(dir, { recursive: true, force: true });
    }
    return this;
  }

  async step(label, op, all, refIndex, piJ) {
    if (op.method === "<reopen>") {
      if (this.backend === "memory") return;
      for (const s of all) await s.reopen();
      if (cfg.verbose) this.log.push(`${label} <reopen>`);
      return;
    }
    const lenBefore = piJ.rawEntries().length;
    const answers = await Promise.all(all.map((s) => s.call(op.method, toRealParams(s, op.params))));
    if (op.method === "buildContext") {
      // The branch the context was built from: its "now" timestamps are the
      // only ones a projected "<now-ms>" may come from.
      const branch = { method: "getBranch", params: op.params.fromId === undefined ? {} : { fromId: op.params.fromId } };
      const got = await Promise.all(all.map((s) => s.call(branch.method, toRealParams(s, branch.params))));
      got.forEach((a, i) => {
        const set = new Set();
        if (a.ok && Array.isArray(a.value)) {
          for (const e of a.value) if (e && clock.isNowIso(e.timestamp)) set.add(Date.parse(e.timestamp));
        }
        all[i].nowMs = set;
      });
      const ok = await this.compare(`${label}-`, branch, all, got, { refIndex });
      if (!ok) return;
    }
    if (GENERATES_ID.has(op.method)) {
      answers.forEach((a, i) => {
        if (a.ok && typeof a.value === "string") {
          const c = all[i].ids.register(a.value);
          if (op.method === "createEntryId" && i === 0) this.created.add(c);
        }
      });
    }
    const agreed = await this.compare(label, op, all, answers, { refIndex });
    for (const s of all) s.nowMs = null;
    if (!agreed) return;
    if (op.method === "setLeafId" || op.method === "moveTo") {
      // Learn the ids of the `leaf` entries the implementations wrote, and
      // compare what was appended.
      const follow = { method: "getEntries", params: { afterEntrySeq: lenBefore } };
      const got = await Promise.all(all.map((s) => s.call(follow.method, follow.params)));
      got.forEach((a, i) => {
        if (a.ok && Array.isArray(a.value)) {
          for (const e of a.value) if (e && typeof e.id === "string") all[i].ids.register(e.id);
        }
      });
      await this.compare(`${label}+`, follow, all, got, { refIndex });
    }
  }

  /** Queries that read a whole session; used on files written by the other side. */
  readQueries(piSide, rng, phase) {
    // When shrinking a cross-check failure, ask the failing query only.
    const only = this.spec.crossOnly;
    if (only) return only.label === phase ? [only.op] : [];
    const ids = [...new Set(piSide.rawEntries().map((e) => piSide.ids.canon(e.id)))];
    const some = rng.shuffle(ids).slice(0, 10);
    const q = [
      { method: "getEntries", params: {} },
      { method: "getLeafId", params: {} },
      { method: "getBranch", params: {} },
      { method: "buildContext", params: {} },
      { method: "getSessionStats", params: {} },
      { method: "getSessionName", params: {} },
      { method: "getMetadata", params: {} },
      { method: "getPathToRootOrCompaction", params: { leafId: null } },
      { method: "getEntriesToFork", params: {} },
    ];
    for (const t of ENTRY_TYPES) q.push({ method: "findEntries", params: { type: t } });
    for (const id of some) {
      q.push({ method: "getEntry", params: { id } });
      q.push({ method: "getLabel", params: { id } });
      q.push({ method: "getPathToRootOrCompaction", params: { leafId: id } });
      q.push({ method: "buildContext", params: { fromId: id } });
      q.push({ method: "getEntriesToFork", params: { entryId: id, position: rng.pick(["before", "at"]) } });
    }
    return q;
  }

  async crossChecks(dir, piJ, ours, rng) {
    const piPath = piJ.path;
    // (a) The file pi wrote, opened by sessiontree.
    const started = await startOurs("ours(pi's file)", this.backend, dir, piPath, this.spec.header.id, "cross");
    if (started.error) {
      this.fail({ label: "cross-a", op: { method: "import", params: { file: "pi.jsonl" } }, kind: "import-failed", ref: { ok: true }, got: { ok: false, error: { code: "import", message: started.error } }, detail: null });
      return;
    }
    const crossOurs = started.side;
    crossOurs.ids = piJ.ids;
    // The memory backend's reference is pi's InMemorySessionStorage over the
    // file's entries; where that constructor refuses the log (a leaf naming a
    // missing entry), it is pi opening the file, which fails only the reads
    // that need the leaf (as `rpc --backend memory` on a file does).
    let crossRef = this.backend === "memory" ? await PiSide.openMemory(piPath, { tolerateFailure: true }) : piJ;
    if (crossRef instanceof FailedSide) crossRef = piJ;
    crossRef.ids = piJ.ids;
    try {
      for (const q of this.readQueries(piJ, rng, "cross(pi file -> ours)")) {
        const answers = [await crossRef.call(q.method, toRealParams(crossRef, q.params)), await crossOurs.call(q.method, toRealParams(crossOurs, q.params))];
        if (!(await this.compare("cross(pi file -> ours)", q, [crossRef, crossOurs], answers, { now: false }))) return;
      }
    } finally {
      await crossOurs.close();
    }
    if (this.backend === "memory") return;

    // (b) The file our backend wrote (jsonl: the session file itself; sqlite:
    // `sessiontree export`), opened by pi.
    let oursFile = ours.path;
    if (isArchive(this.backend)) {
      const out = join(dir, "export");
      let r;
      let exported = null;
      if (this.backend === "node") {
        try {
          exported = (await ours.archive.exportSession(this.spec.header.id, out)).path;
          r = { status: 0 };
        } catch (e) {
          r = { status: e.code ?? "throw", stderr: e.message ?? String(e), stdout: "" };
        }
      } else {
        r = await runOnce(cfg.bin, ["--db", archiveDb(this.backend, dir, "archive"), "export", "--out", out, "--json", this.spec.header.id]);
        try {
          exported = JSON.parse(r.stdout).exported?.[0]?.path;
        } catch {}
      }
      if (r.status !== 0 || !exported) {
        this.fail({ label: "export", op: { method: "export", params: {} }, kind: "export-failed", ref: { ok: true }, got: { ok: false, error: { code: "export", message: `status ${r.status}: ${r.stderr.trim() || r.stdout.trim()}` } }, detail: null });
        return;
      }
      oursFile = resolve(exported);
    }
    const which = isArchive(this.backend) ? "cross(ours export -> pi)" : "cross(ours file -> pi)";
    let piX;
    try {
      piX = await PiSide.openJsonl(oursFile);
    } catch (e) {
      this.fail({ label: which, op: { method: "JsonlSessionStorage.open", params: {} }, kind: "pi-cannot-open", ref: { ok: true }, got: { ok: false, error: { code: e.code, message: e.message } }, detail: null });
      return;
    }
    piX.ids = ours.ids;
    for (const q of this.readQueries(piX, rng, which)) {
      const answers = [await piX.call(q.method, toRealParams(piX, q.params)), await ours.call(q.method, toRealParams(ours, q.params))];
      if (!(await this.compare(which, q, [piX, ours], answers, { now: false }))) return;
    }

    if (isArchive(this.backend)) {
      // (c') The exported entries are pi's entries (ids and "now" normalised).
      const parse = (text, side) =>
        text
          .split("\n")
          .filter((l) => l.trim())
          .map((l) => normalizeAnswer({ ok: true, value: JSON.parse(l) }, side, clock).value);
      const a = parse(readFileSync(piPath, "utf8"), piJ);
      const b = parse(readFileSync(oursFile, "utf8"), ours);
      this.compared += 1;
      const [ha, hb] = [a.shift(), b.shift()];
      const hd = compareAnswers("getMetadata", { ok: true, value: ha }, { ok: true, value: hb });
      if (hd) {
        this.fail({ label: "export", op: { method: "<exported header>", params: {} }, kind: `header-${hd.kind}`, ref: { ok: true, value: ha }, got: { ok: true, value: hb }, detail: hd.detail });
        return;
      }
      const d = compareAnswers("getEntries", { ok: true, value: a }, { ok: true, value: b });
      if (d) {
        this.fail({ label: "export", op: { method: "<exported entries>", params: {} }, kind: d.kind, ref: { ok: true, value: a }, got: { ok: true, value: b }, detail: d.detail });
      }
      return;
    }

    // (c) Line by line, what the two wrote must be the same (ids and "now" normalised).
    const startText = this.spec.pieces.join("");
    const piText = readFileSync(piPath, "utf8");
    const ourText = readFileSync(ours.path, "utf8");
    this.compared += 1;
    if (!ourText.startsWith(startText)) {
      this.fail({ label: "file", op: { method: "<file contents>", params: {} }, kind: "file-rewritten", ref: { ok: true, value: startText }, got: { ok: true, value: ourText.slice(0, startText.length + 200) }, detail: { path: "file prefix", a: "starting file kept byte for byte", b: "changed" } });
      return;
    }
    const piLines = piText.slice(startText.length).split("\n").filter((l) => l.trim());
    const ourLines = ourText.slice(startText.length).split("\n").filter((l) => l.trim());
    const textNorm = (line, side) =>
      normalizeMessage(line, side).replace(/"timestamp":"([^"]*)"/g, (m, ts) => (clock.isNowIso(ts) ? '"timestamp":"<now>"' : m));
    const n = Math.max(piLines.length, ourLines.length);
    for (let i = 0; i < n; i++) {
      const a = piLines[i] === undefined ? "<no line>" : textNorm(piLines[i], piJ);
      const b = ourLines[i] === undefined ? "<no line>" : textNorm(ourLines[i], ours);
      if (a !== b) {
        this.fail({ label: "file", op: { method: "<appended file line>", params: { line: i + 1 } }, kind: "file-line", ref: { ok: true, value: a }, got: { ok: true, value: b }, detail: { path: `appended line ${i + 1}`, a, b } });
        return;
      }
    }
  }
}

function toRealParams(side, params) {
  const walk = (v) => {
    if (typeof v === "string") return side.ids.real(v);
    if (Array.isArray(v)) return v.map(walk);
    if (v && typeof v === "object") {
      const o = {};
      for (const [k, x] of Object.entries(v)) o[k] = walk(x);
      return o;
    }
    return v;
  };
  return walk(params);
}

// ---------------------------------------------------------------- specs

function generatedSpec(seed, backend) {
  const rng = new Rng(seed);
  const gen = new Generator(rng, {
    allowDuplicateIds: !isArchive(backend),
    lateParents: !isArchive(backend) || cfg.exotic.has("sqlite-late-parent"),
    // The memory backend cannot reopen: its appends are not saved.
    reopen: backend !== "memory",
    exotic: cfg.exotic,
  });
  const header = makeHeader(rng, seed);
  // Some sequences start from a window of a real pi session (real costs, real
  // text), converted to v3; others from entries written by hand.
  const real = rng.chance(cfg.realFraction) ? realPrefixEntries(rng) : null;
  if (real) realSequences += 1;
  // Others from a session `sessiontree-bench gen` wrote (adversarial tree shapes),
  // drawn from a stream of their own so the other sequences stay as they were.
  const genRng = new Rng(mixSeed(seed, 0x67656e));
  const generated = !real && genRng.chance(cfg.genFraction) ? generatedPrefixEntries(cfg.genBin, genRng) : null;
  if (generated) genSequences.set(generated.shape, (genSequences.get(generated.shape) ?? 0) + 1);
  const prefixEntries =
    real ?? generated?.entries ?? (rng.chance(0.3) ? makePrefixEntries(rng, gen, rng.range(1, 8), { lateParents: gen.opts.lateParents }) : []);
  const blankHead = cfg.exotic.has("blank-head") && (!isArchive(backend) || cfg.exotic.has("blank-head-import"));
  const pieces = renderFile(rng, header, prefixEntries, { blankHead });
  // A few long sequences grow deeper trees (and see more restarts).
  const nOps = rng.chance(cfg.longFraction) ? rng.range(cfg.maxOps, cfg.maxOps * 5) : rng.range(cfg.minOps, cfg.maxOps);
  return { seed, backend, rng, gen, header, pieces, nOps, ops: null, generated: generated?.args ?? null };
}

function fixedSpec(base, pieces, ops, { noCross = false, crossOnly = null } = {}) {
  return { seed: base.seed, backend: base.backend, rng: null, gen: null, header: base.header, pieces, nOps: ops.length, ops, noCross, crossOnly };
}

// ---------------------------------------------------------------- reporting

const shrinkRun = (failed) => shrink(failed.spec, failed, { run: (spec) => new SequenceRun(spec).run(), fixedSpec, keep: cfg.keep });

function describeRun(run, shrunk) {
  const notes = run.spec.generated ? [`starting file: sessiontree ${run.spec.generated}`] : [];
  const replay = `node tests/differential/run.mjs --bin ${cfg.bin} --backends ${run.backend} --seq-seed ${hex(run.spec.seed)} --verbose --exotic ${EXOTIC.name(cfg.exotic)} --min-ops ${cfg.minOps} --max-ops ${cfg.maxOps} --long ${cfg.longFraction} --real ${cfg.realFraction} --gen ${cfg.genFraction}`;
  return describe(run, shrunk, { replay, notes });
}

// ---------------------------------------------------------------- main

async function main() {
  const t0 = Date.now();
  let backends = cfg.backends;
  const notes = [];
  if (backends.some(isArchive)) {
    sqliteImport = await detectSqliteImport();
    if (!sqliteImport) {
      // Not a skip: without import the sqlite backend cannot be tested, which fails the run.
      backends = backends.filter((b) => !isArchive(b));
      notes.push("FAILED: `sessiontree import` is not available, so the sqlite backend could not be tested");
    }
  }

  const work = [];
  if (cfg.seqSeed !== null) {
    for (const b of backends) work.push({ seed: cfg.seqSeed, backend: b });
  } else {
    for (let i = 0; i < cfg.sequences; i++) {
      for (const b of backends) {
        if (b === "postgres" && i >= cfg.pgSequences) continue;
        work.push({ seed: mixSeed(cfg.seed, BACKEND_INDEX[b], i), backend: b });
      }
    }
  }
  console.log(`differential: base seed ${cfg.seed}, ${work.length} sequences on ${backends.join(", ")}, ${cfg.minOps}-${cfg.maxOps} ops each, exotic inputs: ${EXOTIC.name(cfg.exotic)}, ${cfg.jobs} jobs`);

  let done = 0;
  const runs = await pool(work, cfg.jobs, async (w) => {
    const spec = generatedSpec(w.seed, w.backend);
    const run = await new SequenceRun(spec).run();
    done += 1;
    if (done % 200 === 0) console.log(`  ... ${done}/${work.length} sequences (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    return run;
  });

  const tally = await report(runs, {
    verbose: cfg.verbose,
    coverage: cfg.coverage,
    coverageTitle: "reference answers compared, by method and outcome",
    shrinkRun: cfg.shrink ? shrinkRun : null,
    maxShrunk: 12,
    describeRun,
  });
  const off = EXOTIC.offKnown(cfg.exotic);
  if (off.length) {
    console.log(`not generated (known mismatches, enable with DIFF_EXOTIC=all): ${off.join(", ")}`);
  }
  if (realFixtureCount() === 0) {
    console.log(`real pi sessions: none found at ${FIXTURE_DIR} (set DIFF_FIXTURES); no sequence started from one`);
  } else {
    console.log(`real pi sessions: ${realSequences} sequences started from a window of one of ${realFixtureCount()} files in ${FIXTURE_DIR}`);
  }
  const genTotal = [...genSequences.values()].reduce((a, b) => a + b, 0);
  const genShapes = GEN_SHAPES.map((s) => `${s} ${genSequences.get(s) ?? 0}`).join(", ");
  console.log(`generated sessions: ${genTotal} sequences started from \`sessiontree gen\` output (${genShapes})`);
  for (const n of notes) console.log(n);
  for (const [b, s] of Object.entries(tally.perBackend)) {
    console.log(`  ${b}: ${s.sequences} sequences, ${s.ops} operations compared, ${s.mismatches} mismatching sequences`);
  }
  console.log(summaryLine("differential", runs, tally, t0, "operations"));
  process.exitCode = tally.failures.length || tally.harnessErrors.length || sqliteImport === false ? 1 : 0;
}

main().catch((e) => {
  console.error(e);
  process.exit(3);
});
