// Normalisation and comparison of answers.
//
// Normalisation (per side): real generated ids -> canonical names; the side's
// own file path -> "<path>"; timestamps the implementation wrote itself ("now",
// always in toISOString form and inside the run's time window) -> "<now>", and
// the millisecond timestamps buildContext projects from them -> "<now-ms>".
// Caller-chosen timestamps all lie years before the run and stay as they are.

const ISO_MS_Z = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

export class Clock {
  constructor() {
    this.start = Date.now() - 2000;
  }
  isNow(ms) {
    return Number.isInteger(ms) && ms >= this.start && ms <= Date.now() + 2000;
  }
  isNowIso(s) {
    return typeof s === "string" && ISO_MS_Z.test(s) && this.isNow(Date.parse(s));
  }
}

export function normalize(value, side, clock, { now = true, nowKeys = ["timestamp"] } = {}) {
  const walk = (v, key) => {
    if (typeof v === "string") {
      const c = side.ids.r2c.get(v);
      if (c !== undefined) return c;
      if (now && nowKeys.includes(key) && clock.isNowIso(v)) return "<now>";
      if (side.path && v === side.path) return "<path>";
      return v;
    }
    if (typeof v === "number") {
      // A projected "now" must be exactly the millisecond value of one of the
      // side's own entry timestamps, when the runner collected them.
      if (now && key === "timestamp" && clock.isNow(v) && (!side.nowMs || side.nowMs.has(v))) return "<now-ms>";
      return v;
    }
    if (Array.isArray(v)) return v.map((x) => walk(x, undefined));
    if (v && typeof v === "object") {
      const out = {};
      for (const [k, x] of Object.entries(v)) out[k] = walk(x, k);
      return out;
    }
    return v;
  };
  return walk(value, undefined);
}

export function normalizeMessage(message, side) {
  let m = String(message ?? "");
  const reals = [...side.ids.r2c.keys()].sort((a, b) => b.length - a.length);
  for (const r of reals) if (r) m = m.split(r).join(side.ids.r2c.get(r));
  if (side.path) m = m.split(side.path).join("<path>");
  return m;
}

export function normalizeAnswer(ans, side, clock, opts) {
  if (ans.ok) return { ok: true, value: normalize(ans.value, side, clock, opts) };
  return {
    ok: false,
    error: { code: ans.error?.code, message: normalizeMessage(ans.error?.message, side) },
  };
}

/** Deep equality ignoring key order. */
export function deepEqual(a, b) {
  if (a === b) return true;
  if (typeof a === "number" && typeof b === "number") return Object.is(a, b) || a === b;
  if (typeof a !== typeof b || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    if (a.length !== b.length) return false;
    return a.every((x, i) => deepEqual(x, b[i]));
  }
  if (typeof a === "object") {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    if (ka.length !== kb.length) return false;
    return ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && deepEqual(a[k], b[k]));
  }
  return false;
}

/** The first place where two values differ (key order ignored unless `ordered`). */
export function firstDifference(a, b, ordered = false, path = "value") {
  if (typeof a === "number" && typeof b === "number") {
    return Object.is(a, b) || a === b ? null : { path, a, b };
  }
  if (a === b) return null;
  if (typeof a !== typeof b || a === null || b === null || Array.isArray(a) !== Array.isArray(b)) {
    return { path, a, b };
  }
  if (Array.isArray(a)) {
    const n = Math.max(a.length, b.length);
    for (let i = 0; i < n; i++) {
      if (i >= a.length || i >= b.length) return { path: `${path}[${i}]`, a: a[i], b: b[i], note: `length ${a.length} vs ${b.length}` };
      const d = firstDifference(a[i], b[i], ordered, `${path}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  if (typeof a === "object") {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    for (const k of ka) {
      if (!Object.prototype.hasOwnProperty.call(b, k)) return { path: `${path}.${k}`, a: a[k], b: "<absent>" };
    }
    for (const k of kb) {
      if (!Object.prototype.hasOwnProperty.call(a, k)) return { path: `${path}.${k}`, a: "<absent>", b: b[k] };
    }
    if (ordered && ka.join("\u0000") !== kb.join("\u0000")) {
      return { path, a: `keys ${JSON.stringify(ka)}`, b: `keys ${JSON.stringify(kb)}`, note: "key order" };
    }
    for (const k of ka) {
      const d = firstDifference(a[k], b[k], ordered, `${path}.${k}`);
      if (d) return d;
    }
    return null;
  }
  return { path, a, b };
}

// Errors whose message is part of the contract ("Entry X not found", ...).
const CONTRACT_MESSAGE_CODES = new Set(["not_found", "invalid_fork_target", "invalid_session", "invalid_entry"]);

// Methods whose answers are entries (or context messages): there the key
// order is the file format's and must match too. Statistics and metadata are
// compared without regard to key order.
const ORDERED_METHODS = new Set([
  "getEntry",
  "getEntries",
  "findEntries",
  "getPathToRootOrCompaction",
  "getBranch",
  "getEntriesToFork",
  "buildContext",
]);

/**
 * Compares a normalised reference answer with a normalised answer under test.
 * Returns null when they agree, else `{kind, detail}`.
 */
export function compareAnswers(method, ref, got) {
  if (ref.ok !== got.ok) return { kind: "ok-ness", detail: null };
  if (!ref.ok) {
    if (ref.error.code !== got.error.code) return { kind: "error-code", detail: { path: "error.code", a: ref.error.code, b: got.error.code } };
    if (CONTRACT_MESSAGE_CODES.has(ref.error.code) && ref.error.message !== got.error.message) {
      return { kind: "error-message", detail: { path: "error.message", a: ref.error.message, b: got.error.message } };
    }
    return null;
  }
  const d = firstDifference(ref.value, got.value, false);
  if (d) return { kind: "value", detail: d };
  if (ORDERED_METHODS.has(method)) {
    // buildContext: the messages keep their keys' order (they are the
    // entries' message objects, or pi's projections); the state fields are
    // plain values whose key order means nothing.
    const o =
      method === "buildContext" && ref.value && got.value
        ? firstDifference(ref.value.messages, got.value.messages, true, "value.messages")
        : firstDifference(ref.value, got.value, true);
    if (o) return { kind: "key-order", detail: o };
  }
  return null;
}
