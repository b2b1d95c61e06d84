// Starting files: a v3 header and, for some sequences, entries written "by
// hand" with the spellings pi's reader accepts (extra spaces, CRLF, blank
// lines, duplicate keys where the last wins, \u escapes, key order).

import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { makeSnapshot } from "./gen.mjs";

/** Real pi sessions, found through ../shared beside the project (never copied into it). */
export const FIXTURE_DIR =
  process.env.DIFF_FIXTURES ??
  resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "shared", "fixtures", "pi-sessions");

let fixtures = null;
function loadFixtures() {
  if (fixtures) return fixtures;
  fixtures = [];
  let names = [];
  try {
    names = readdirSync(FIXTURE_DIR).filter((n) => n.endsWith(".jsonl")).sort();
  } catch {
    return fixtures;
  }
  for (const n of names) {
    const lines = readFileSync(join(FIXTURE_DIR, n), "utf8").split("\n").filter((l) => l.trim());
    // Every line but the header is an entry; v1 files have no ids yet.
    fixtures.push(lines.slice(1).map((l) => JSON.parse(l)).filter((e) => e && typeof e === "object" && e.type !== "session"));
  }
  return fixtures;
}

/** How many real pi sessions were found. */
export function realFixtureCount() {
  return loadFixtures().length;
}

/**
 * A window of a real pi session as v3 entries (ids and a parent chain added
 * the way pi's migration links a v1 file: each entry the child of the one
 * before), or null when there are none. Mostly short windows; sometimes the
 * whole file.
 */
export function realPrefixEntries(rng) {
  const all = loadFixtures();
  if (all.length === 0) return null;
  const file = rng.pick(all);
  const len = rng.chance(0.05) ? file.length : Math.min(file.length, rng.range(3, 60));
  const start = rng.int(file.length - len + 1);
  const out = [];
  let parent = null;
  for (const [i, e] of file.slice(start, start + len).entries()) {
    const { type, id, parentId, timestamp, ...rest } = e;
    const entry = { type, id: id ?? `real${String(start + i).padStart(5, "0")}`, parentId: id ? parentId ?? null : parent, timestamp, ...rest };
    if (id && parentId && !out.some((o) => o.id === parentId)) entry.parentId = parent;
    out.push(entry);
    parent = entry.id;
  }
  return out;
}

/** The shapes `sessiontree-bench gen --shape` knows (benches/src/gen.rs, `Shape::as_str`). */
export const GEN_SHAPES = ["linear", "forked", "archive", "regenerate", "caterpillar", "broom", "dangling-root"];

/**
 * The entries of a session written by `sessiontree-bench gen` (`bin`): a shape of
 * GEN_SHAPES, 20–200 entries, compactions every few entries (or none), the
 * generator's seed and options drawn from `rng`. For an archive, its first
 * session. Returns `{ entries, shape, args }` (`args`: the gen command line,
 * for reports).
 */
export function generatedPrefixEntries(bin, rng) {
  const shape = rng.pick(GEN_SHAPES);
  const args = ["--json", "gen", "--shape", shape, "--entries", String(rng.range(20, 200)), "--seed", String(rng.next())];
  args.push("--compaction-every", String(rng.chance(0.2) ? 0 : rng.range(4, 60)));
  if ((shape === "regenerate" || shape === "caterpillar") && rng.chance(0.5)) args.push("--fork-every", String(rng.range(1, 6)));
  const out = mkdtempSync(join(tmpdir(), "sessiontree-diff-gen-"));
  try {
    const report = JSON.parse(execFileSync(bin, [...args, "--out", out], { encoding: "utf8" }));
    const lines = readFileSync(report.sessions[0].path, "utf8").split("\n").filter((l) => l.trim());
    return { entries: lines.slice(1).map((l) => JSON.parse(l)), shape, args: args.slice(1).join(" ") };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

function hex(n, width) {
  return (n >>> 0).toString(16).padStart(width, "0").slice(-width);
}

export function makeHeader(rng, seed) {
  const id = `019${hex(seed, 5)}-${hex(rng.next(), 4)}-7${hex(rng.next(), 3)}-8${hex(rng.next(), 3)}-${hex(rng.next(), 8)}${hex(rng.next(), 4)}`;
  const header = { type: "session", version: 3, id, timestamp: "2024-05-06T07:08:09.010Z", cwd: "/work/diff" };
  if (rng.chance(0.15)) header.parentSession = "/sessions/--work-diff--/parent.jsonl";
  if (rng.chance(0.15)) header.metadata = { title: "diff", tags: ["a", "b"], n: 1 };
  return header;
}

/** JSON with optional spaces around punctuation and optional \u escapes of non-ASCII. */
function serialize(v, { spaced = false, escape = false } = {}) {
  const sp = spaced ? " " : "";
  const str = (s) => {
    let j = JSON.stringify(s);
    if (escape) j = j.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
    return j;
  };
  const walk = (x) => {
    if (typeof x === "string") return str(x);
    if (Array.isArray(x)) return `[${sp}${x.map(walk).join(`${sp},${sp}`)}${sp}]`;
    if (x && typeof x === "object") {
      const parts = Object.entries(x)
        .filter(([, val]) => val !== undefined)
        .map(([k, val]) => `${str(k)}${sp}:${sp}${walk(val)}`);
      return `{${sp}${parts.join(`${sp},${sp}`)}${sp}}`;
    }
    return JSON.stringify(x);
  };
  return walk(v);
}

const DECOYS = {
  type: "message",
  id: "decoy-id",
  parentId: "decoy-parent",
  timestamp: "1999-01-01T00:00:00.000Z",
  label: "decoy label",
  name: "decoy name",
  targetId: "decoy-target",
};

/** One entry as a file line, in a random accepted spelling. */
function entryLine(rng, entry) {
  const style = rng.weighted([
    [7, "plain"],
    [1, "spaced"],
    [1, "escaped"],
    [1, "duplicate-key"],
  ]);
  let line;
  if (style === "spaced") line = serialize(entry, { spaced: true });
  else if (style === "escaped") line = serialize(entry, { escape: true });
  else if (style === "duplicate-key") {
    const keys = Object.keys(DECOYS).filter((k) => k in entry);
    const k = rng.pick(keys);
    line = `{${JSON.stringify(k)}:${JSON.stringify(DECOYS[k])},${JSON.stringify(entry).slice(1)}`;
  } else line = JSON.stringify(entry);
  if (rng.chance(0.08)) line = `  ${line}\t `;
  return line;
}

/**
 * Builds a starting file. Returns `{text, entries}`; `entries` are the
 * caller-chosen entries (for shrinking, a file can be rebuilt from a subset).
 */
export function makePrefixEntries(rng, gen, count, { lateParents = false } = {}) {
  const canon = [];
  for (let i = 0; i < count; i++) {
    let leaf = null;
    for (const e of canon) leaf = e.type === "leaf" ? e.targetId : e.id;
    const snap = makeSnapshot(
      canon.map((e) => ({ cid: e.id, type: e.type, parent: e.parentId, role: e.message?.role })),
      leaf,
      [],
    );
    canon.push(gen.callerEntry(snap, { forPrefix: true }));
  }
  // Sometimes a child comes before its parent in the file (pi does not mind).
  if (lateParents && canon.length >= 2 && rng.chance(0.15)) {
    const i = rng.int(canon.length - 1);
    const j = rng.range(i + 1, canon.length - 1);
    const parentOf = new Map(canon.map((e) => [e.id, e.parentId]));
    let cur = canon[j].id;
    const seen = new Set();
    let cycle = false;
    while (cur && !seen.has(cur)) {
      if (cur === canon[i].id) cycle = true;
      seen.add(cur);
      cur = parentOf.get(cur);
    }
    if (!cycle && canon[j].id !== canon[i].id) canon[i] = { ...canon[i], parentId: canon[j].id };
  }
  return canon;
}

/** Renders a starting file as pieces (header piece first, then one per entry) to be joined. */
export function renderFile(rng, header, entries, { fancy = true, blankHead = true } = {}) {
  const eol = () => (fancy && rng.chance(0.1) ? "\r\n" : "\n");
  let head = "";
  if (fancy && rng.chance(0.05) && blankHead) head += "\n   \n";
  head += JSON.stringify(header) + eol();
  const pieces = [head];
  for (const e of entries) {
    let piece = "";
    if (fancy && rng.chance(0.08)) piece += rng.pick(["", "   ", "\t", "\r"]) + "\n";
    piece += (fancy ? entryLine(rng, e) : JSON.stringify(e)) + eol();
    pieces.push(piece);
  }
  return pieces;
}
