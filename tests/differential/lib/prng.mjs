// Deterministic PRNG (sfc32 seeded through splitmix32). Every random choice of
// the harness goes through one of these, so a sequence is fully determined by
// its seed.

function splitmix32(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** Mixes numbers into one 32-bit seed. */
export function mixSeed(...parts) {
  let h = 0x811c9dc5;
  for (const p of parts) {
    const next = splitmix32((h ^ (p >>> 0)) >>> 0);
    h = next();
  }
  return h >>> 0;
}

export class Rng {
  constructor(seed) {
    const init = splitmix32(seed);
    this.a = init();
    this.b = init();
    this.c = init();
    this.d = init();
    for (let i = 0; i < 12; i++) this.next();
  }
  /** A uniform 32-bit unsigned integer. */
  next() {
    const t = (((this.a + this.b) >>> 0) + this.d) >>> 0;
    this.d = (this.d + 1) >>> 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) >>> 0;
    this.c = ((this.c << 21) | (this.c >>> 11)) >>> 0;
    this.c = (this.c + t) >>> 0;
    return t >>> 0;
  }
  /** A float in [0, 1). */
  float() {
    return this.next() / 4294967296;
  }
  /** An integer in [0, n). */
  int(n) {
    return Math.floor(this.float() * n);
  }
  /** An integer in [lo, hi]. */
  range(lo, hi) {
    return lo + this.int(hi - lo + 1);
  }
  chance(p) {
    return this.float() < p;
  }
  pick(items) {
    return items[this.int(items.length)];
  }
  /** Picks from `[[weight, value], ...]`; a function value is called. */
  weighted(table) {
    let total = 0;
    for (const [w] of table) total += w;
    let x = this.float() * total;
    for (const [w, v] of table) {
      if (x < w) return typeof v === "function" ? v() : v;
      x -= w;
    }
    const last = table[table.length - 1][1];
    return typeof last === "function" ? last() : last;
  }
  shuffle(items) {
    const a = [...items];
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [a[i], a[j]] = [a[j], a[i]];
    }
    return a;
  }
}
