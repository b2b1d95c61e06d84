// The parts of a differential run that do not depend on the contract under
// test: exotic-category options, the job pool, tallying, shrinking a failing
// sequence and describing it. Used by tests/differential/run.mjs (the SDK
// contract) and tests/app-differential/run.mjs (the app contract), which
// differ in their sides, generators and operations, not in how a run is
// driven and reported.

import { createHash } from "node:crypto";
import { rmSync } from "node:fs";

/** A seed as the 8 hex digits printed on failure and taken by `--seq-seed`. */
export const hex = (n) => (n >>> 0).toString(16).padStart(8, "0");

/** A JSON rendering short enough for a log line. */
export function show(v) {
  const s = JSON.stringify(v);
  return s === undefined ? "undefined" : s.length > 1500 ? `${s.slice(0, 1500)}…` : s;
}

/**
 * The team archive of sequence directory `dir` (`name`): its own schema of the
 * test server (SESSIONTREE_TEST_PG), named from `prefix` and a digest so that
 * the two harnesses never share one.
 */
export function pgUrl(prefix, dir, name) {
  const schema = `${prefix}_${createHash("sha1").update(`${dir}/${name}`).digest("hex").slice(0, 24)}`;
  const server = process.env.SESSIONTREE_TEST_PG;
  return `${server}${server.includes("?") ? "&" : "?"}options=-csearch_path%3D${schema}`;
}

/**
 * The exotic input categories of a harness: all of `categories`, of which
 * those in `knownMismatches` (category -> why) are left out by default.
 */
export class ExoticCategories {
  constructor(tool, categories, knownMismatches) {
    this.tool = tool;
    this.categories = categories;
    this.knownMismatches = knownMismatches;
    this.defaults = categories.filter((c) => !(c in knownMismatches));
  }

  /** The set named by `spec`: "default", "all" (or 1), "none" (or 0, ""), or a comma list. */
  parse(spec) {
    if (spec === "default") return new Set(this.defaults);
    if (spec === "all" || spec === "1") return new Set(this.categories);
    if (spec === "none" || spec === "0" || spec === "") return new Set();
    const set = new Set();
    for (const c of spec.split(",").map((x) => x.trim()).filter(Boolean)) {
      if (c === "default" || c === "all") {
        for (const d of this.parse(c)) set.add(d);
      } else if (this.categories.includes(c)) {
        set.add(c);
      } else {
        console.error(`${this.tool}: unknown exotic category ${c} (known: ${this.categories.join(", ")})`);
        process.exit(2);
      }
    }
    return set;
  }

  /** The shortest spec naming `set`, for a replay line. */
  name(set) {
    if (set.size === this.categories.length) return "all";
    if (set.size === this.defaults.length && this.defaults.every((c) => set.has(c))) return "default";
    if (set.size === 0) return "none";
    return [...set].join(",");
  }

  /** The categories `set` leaves out that are known mismatches, for the run's summary. */
  offKnown(set) {
    return Object.keys(this.knownMismatches).filter((c) => !set.has(c));
  }
}

/** Runs `fn` over `items` with at most `jobs` at once; the results in order. */
export async function pool(items, jobs, fn) {
  const results = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, jobs) }, worker));
  return results;
}

/** What makes two mismatches the same failure: method, kind and the shape of the first difference's path. */
export function signature(m) {
  const path = m.detail?.path ? String(m.detail.path).replace(/\[\d+\]/g, "[]") : "";
  return `${m.op.method}|${m.kind}|${path}`;
}

/**
 * Shrinks a failing sequence: drops operations (the failing one stays last)
 * and entries of the starting file while the same mismatch remains.
 *
 * - `run(spec)`: runs a sequence, giving its result (with `mismatch`,
 *   `executed`, `idDeltas`, `dir`); its directory is removed unless `keep`.
 * - `fixedSpec(base, pieces, ops, { noCross, crossOnly })`: a spec replaying
 *   exactly `ops` from the starting file `pieces`.
 * - `mayDropPieces(base, pieces)`: whether starting-file entries may be dropped.
 */
export async function shrink(base, failed, { run, fixedSpec, keep, mayDropPieces = () => true, passes = 4 }) {
  const sig = signature(failed.mismatch);
  const reproduces = async (spec) => {
    const r = await run(spec);
    if (r.dir && !keep) rmSync(r.dir, { recursive: true, force: true });
    return r.mismatch && signature(r.mismatch) === sig ? r : null;
  };
  const crossFailure = !failed.mismatch.label.startsWith("#");
  let ops = failed.executed.slice();
  let deltas = failed.idDeltas.slice();
  let pieces = base.pieces.slice();
  let best = failed;
  // A cross-check failure is replayed with the failing query only.
  let crossOp = crossFailure && failed.mismatch.label.startsWith("cross") ? failed.mismatch.op : null;
  // Removing an operation that generated ids renumbers the later "#gN"
  // references; references to the removed op's own ids become unknown ids.
  const renumberer = (i) => {
    const first = deltas.slice(0, i).reduce((a, b) => a + b, 0);
    const d = deltas[i] ?? 0;
    const renumber = (v) => {
      if (typeof v === "string") {
        const m = /^#g(\d+)$/.exec(v);
        if (!m || d === 0) return v;
        const n = Number(m[1]);
        if (n <= first) return v;
        return n <= first + d ? `#gone${n}` : `#g${n - d}`;
      }
      if (Array.isArray(v)) return v.map(renumber);
      if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, renumber(x)]));
      return v;
    };
    return renumber;
  };
  const attempt = async (o, p, c) => {
    const crossOnly = c ? { label: failed.mismatch.label, op: c } : null;
    const r = await reproduces(fixedSpec(base, p, o, { noCross: !crossFailure, crossOnly }));
    if (!r) return false;
    [ops, pieces, crossOp, best, deltas] = [o, p, c, r, r.idDeltas.slice()];
    return true;
  };
  for (let pass = 0; pass < passes; pass++) {
    const before = ops.length + pieces.length;
    const lastKept = crossFailure ? ops.length : ops.length - 1;
    for (let i = Math.min(lastKept, ops.length) - 1; i >= 0; i--) {
      const ren = renumberer(i);
      await attempt(ops.filter((_, j) => j !== i).map(ren), pieces, crossOp && ren(crossOp));
    }
    if (mayDropPieces(base, pieces)) {
      for (let i = pieces.length - 1; i >= 1; i--) await attempt(ops, pieces.filter((_, j) => j !== i), crossOp);
    }
    if (ops.length + pieces.length === before) break;
  }
  return { ops, pieces, run: best };
}

/**
 * A failing sequence as the lines a developer needs: the mismatch, `notes`
 * about its starting file, the `replay` command and the shrunk reproduction.
 */
export function describe(run, shrunk, { replay, notes = [] }) {
  const m = run.mismatch;
  const lines = [];
  lines.push(`MISMATCH [${run.backend}] seq-seed=${hex(run.spec.seed)} at ${m.label}: ${m.kind}`);
  lines.push(`  op:   ${m.op.method} ${show(m.op.params)}`);
  lines.push(`  ${m.refSide ?? "pi"}: ${show(m.ref)}`);
  lines.push(`  ${m.side ?? "ours"}: ${show(m.got)}`);
  if (m.detail) lines.push(`  first difference at ${m.detail.path}${m.detail.note ? ` (${m.detail.note})` : ""}: pi ${show(m.detail.a)} vs ours ${show(m.detail.b)}`);
  for (const n of notes) lines.push(`  ${n}`);
  lines.push(`  replay: ${replay}`);
  if (run.dir) lines.push(`  files kept in ${run.dir}`);
  if (shrunk) {
    lines.push(`  minimal reproduction (${shrunk.ops.length} ops; "#gN" is the N-th id an implementation generated):`);
    lines.push("    starting file:");
    for (const p of shrunk.pieces) for (const l of p.split("\n")) if (l !== "") lines.push(`      ${JSON.stringify(l).slice(1, -1).slice(0, 600)}`);
    shrunk.ops.forEach((o, i) => lines.push(`    ${i}: ${o.method} ${show(o.params)}`));
    const sm = shrunk.run.mismatch;
    lines.push(`    -> at ${sm.label} ${sm.op.method} ${show(sm.op.params)}`);
    lines.push(`       pi:   ${show(sm.ref)}`);
    lines.push(`       ours: ${show(sm.got)}`);
  }
  return lines.join("\n");
}

/**
 * Tallies finished sequences and prints the failures: per backend counts,
 * coverage (with `coverage`), every sequence's log (with `verbose`), then each
 * distinct failure once, the first `maxShrunk` of them shrunk by
 * `shrinkRun(run)`, and `describeRun(run, shrunk)` for each.
 */
export async function report(runs, { verbose, coverage, coverageTitle, shrinkRun, maxShrunk, describeRun }) {
  let compared = 0;
  const failures = [];
  const harnessErrors = [];
  const perBackend = {};
  for (const r of runs) {
    compared += r.compared;
    const pb = (perBackend[r.backend] ??= { sequences: 0, ops: 0, mismatches: 0 });
    pb.sequences += 1;
    pb.ops += r.compared;
    if (r.mismatch) {
      failures.push(r);
      pb.mismatches += 1;
    }
    if (r.harnessError) harnessErrors.push(r);
    if (verbose) {
      console.log(`--- [${r.backend}] seq-seed=${hex(r.spec.seed)}`);
      for (const l of r.log) console.log(l);
    }
  }
  if (coverage) {
    const total = new Map();
    for (const r of runs) for (const [k, n] of r.coverage) total.set(k, (total.get(k) ?? 0) + n);
    console.log(`coverage (${coverageTitle}):`);
    for (const k of [...total.keys()].sort()) console.log(`  ${String(total.get(k)).padStart(7)}  ${k}`);
  }
  const groups = new Map();
  for (const f of failures) {
    const sig = `${f.backend}|${signature(f.mismatch)}`;
    if (!groups.has(sig)) groups.set(sig, []);
    groups.get(sig).push(f);
  }
  let shrunkCount = 0;
  for (const fs of groups.values()) {
    const first = fs[0];
    let shrunk = null;
    if (shrinkRun && shrunkCount < maxShrunk) {
      shrunkCount += 1;
      try {
        shrunk = await shrinkRun(first);
      } catch (e) {
        console.log(`  (shrinking failed: ${e.message})`);
      }
    }
    console.log("");
    console.log(describeRun(first, shrunk));
    if (fs.length > 1) console.log(`  (${fs.length - 1} more sequences fail the same way: ${fs.slice(1, 6).map((f) => hex(f.spec.seed)).join(", ")}${fs.length > 6 ? ", …" : ""})`);
  }
  for (const h of harnessErrors) console.log(`\nHARNESS ERROR [${h.backend}] seq-seed=${hex(h.spec.seed)}: ${h.harnessError}`);
  console.log("");
  return { compared, failures, harnessErrors, perBackend, distinct: groups.size };
}

/** The run's last line: sequences, answers compared, failures and time since `t0`. */
export function summaryLine(tool, runs, tally, t0, what) {
  return (
    `${tool}: ${runs.length} sequences, ${tally.compared} ${what} compared, ${tally.failures.length} mismatches` +
    (tally.distinct ? ` (${tally.distinct} distinct)` : "") +
    (tally.harnessErrors.length ? `, ${tally.harnessErrors.length} harness errors` : "") +
    ` in ${((Date.now() - t0) / 1000).toFixed(1)} s`
  );
}
