// Material, starting files and operations for the app contract's differential
// test. Operations are canonical: ids an implementation generated are "#g1",
// "#g2", ... (translated to each side's real ids just before the call); ids of
// the starting file are plain strings, the same on every side.
//
// Exotic categories (APPDIFF_EXOTIC):
//   surrogates   lone UTF-16 surrogates in texts, labels, names, types, providers
//   huge         strings of 100,000-300,000 characters
//   deep         `details`/`data` nested 100-400 levels deep
//   bad-dates    entry timestamps JavaScript cannot parse (getTree sorts them as equal)
//   empty-timestamp  entries whose timestamp is "" (pi reads them as entries)
//   no-usage     assistant messages without `usage` (pi's /session stats throw)
//   duplicate-ids  starting files where an id occurs twice (jsonl and memory backends)
//   duplicate-ids-archive  the same imported into an archive
//   malformed    starting files with lines pi skips (garbage, truncated JSON, `null`)
//   v1           starting files in version 1 (no ids; pi migrates them on open), on
//                memory and archive backends
//   v1-jsonl     the same on the jsonl backend, which opens them read-only

export const EXOTIC_CATEGORIES = ["surrogates", "huge", "deep", "bad-dates", "empty-timestamp", "no-usage", "duplicate-ids", "duplicate-ids-archive", "malformed", "v1", "v1-jsonl"];

const TEXTS = [
  "hello",
  "Fix the failing test in src/lib.rs",
  "",
  "  padded  ",
  "line one\nline two",
  "tab\tseparated",
  'quote " and backslash \\',
  "émoji 😀 and ünïcode",
  "\u2028line separator\u2029",
  "null \u0000 byte",
  "日本語のテキスト",
  "x".repeat(300),
];
const SURROGATES = ["lone \ud800 surrogate", "\udfff", " \udbff padded ", "pair \ud83d\ude00 then lone \udc00"];
const LABELS = ["bookmark", "two words", "  padded label  ", " ", "\t", "ünïcode 🏷", "a\nb", "checkpoint 1", "\u00a0nbsp"];
const NAMES = ["My session", "a\r\nb", "\n\nx\r", "", "  ", "name with  double  spaces", "🚀 launch", "\u2028x"];
const THINKING = ["off", "minimal", "low", "medium", "high", "xhigh"];
const PROVIDERS = ["anthropic", "openai", "google", "local/ollama"];
const MODELS = ["claude-sonnet-4", "gpt-5", "gemini-2.5-pro", "llama3:8b", "claude-opus-4-5"];
const TOOLS = ["read", "bash", "edit", "write", "grep"];
const CUSTOM_TYPES = ["ext:state", "todo", "plan-mode", "ünï"];
const USAGE_KINDS = ["compaction", "branch_summary", "title", "tool", "summary"];
const ISO = [
  "2023-01-02T03:04:05.678Z",
  "2021-12-31T23:59:59.999Z",
  "2000-02-29T12:00:00.000Z",
  "2022-06-15T08:30:00.500Z",
  "2023-03-01T10:00:00Z",
  "2023-03-01T10:00:00.000+05:30",
  "2023-03-01T10:00:00-08:00",
];
const BAD_DATES = ["garbage", "not a date"];
const OLD_MS = [1700000000000, 1600000000123, 1234567890123, 1763681581544];

export class AppGen {
  constructor(rng, exotic, { archive = false } = {}) {
    this.rng = rng;
    this.exotic = exotic;
    this.archive = archive;
    this.unknown = 0;
  }

  ex(category, p = 0.05) {
    return this.exotic.has(category) && this.rng.chance(p);
  }

  text() {
    const r = this.rng;
    if (this.ex("surrogates")) return r.pick(SURROGATES);
    if (this.ex("huge", 0.01)) return "h".repeat(r.range(100000, 300000)) + r.pick(SURROGATES.concat(["end"]));
    return r.pick(TEXTS);
  }
  word(list) {
    return this.ex("surrogates") ? this.rng.pick(SURROGATES) : this.rng.pick(list);
  }
  oldMs() {
    return this.rng.pick(OLD_MS);
  }
  timestamp() {
    if (this.ex("bad-dates")) return this.rng.pick(BAD_DATES);
    if (this.ex("empty-timestamp", 0.02)) return "";
    return this.rng.pick(ISO);
  }

  /** A JSON value for details/data; sometimes deeply nested. */
  json() {
    const r = this.rng;
    if (this.ex("deep", 0.04)) {
      let v = { leaf: this.text() };
      for (let i = r.range(100, 400); i > 0; i--) v = r.chance(0.5) ? { n: v } : [v];
      return v;
    }
    return r.weighted([
      [3, () => ({ note: this.text(), n: this.number(), ok: r.chance(0.5) })],
      [1, () => [1, "two", null, { three: 3.5 }]],
      [1, null],
      [1, () => this.text()],
      [1, () => this.number()],
      [1, () => ({ nested: { deeper: { list: [this.text(), this.cost()] } }, "key with spaces": true })],
    ]);
  }

  number() {
    const r = this.rng;
    return r.weighted([
      [6, () => r.int(5000)],
      [2, () => r.int(400000)],
      [1, 0],
      [1, () => r.pick([2 ** 53 + 2, 1e17, 123456789012345680000, 1e21])],
    ]);
  }

  /** A cost as pi computes it: token counts times per-million prices, summed (15-17 significant digits). */
  cost() {
    const r = this.rng;
    return r.weighted([
      [4, () => {
        const prices = [3, 15, 0.3, 3.75, 0.8, 4, 1.25, 5, 25, 0.5, 1.5, 0.075];
        let total = 0;
        for (let i = r.range(1, 4); i > 0; i--) total += (r.int(200000) * r.pick(prices)) / 1e6;
        return total;
      }],
      [2, () => r.pick([0.011844299999999999, 0.026755499999999998, 0.037346700000000004, 0.0029907, 0.34508130000000004, 0.1, 0.2, 0.3])],
      [1, 0],
      [0.5, () => r.pick([5e-324, 1e308, 2 ** 53 + 2, 1 / 3])],
    ]);
  }

  usage() {
    const r = this.rng;
    const u = {
      input: this.number(),
      output: this.number(),
      cacheRead: this.number(),
      cacheWrite: this.number(),
      totalTokens: this.number(),
      cost: { input: this.cost(), output: this.cost(), cacheRead: this.cost(), cacheWrite: 0, total: this.cost() },
    };
    if (r.chance(0.1)) u.cacheWrite1h = this.number();
    if (r.chance(0.1)) u.reasoning = this.number();
    if (r.chance(0.1)) u.cost.totalFromProvider = r.chance(0.5);
    return u;
  }

  textBlocks() {
    const r = this.rng;
    const out = [];
    for (let i = r.range(1, 3); i > 0; i--) {
      out.push(
        r.weighted([
          [5, () => ({ type: "text", text: this.text() })],
          [1, () => ({ type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" })],
        ]),
      );
    }
    return out;
  }

  systemMessage() {
    const r = this.rng;
    const m = { role: "system", content: r.chance(0.8) ? this.text() : [{ type: "text", text: this.text() }] };
    if (r.chance(0.3)) m.sections = { rules: this.text(), ...(r.chance(0.3) ? { old: null } : {}) };
    if (r.chance(0.4)) m.toolsAdded = r.shuffle(TOOLS).slice(0, r.range(1, 3)).map((name) => ({ name, description: `the ${name} tool`, parameters: { type: "object", properties: {} } }));
    if (r.chance(0.2)) m.toolsRemoved = [{ name: r.pick(TOOLS) }];
    m.timestamp = this.oldMs();
    return m;
  }

  /** A message as pi's agent writes it; `nullContent` sometimes gives `content: null`. */
  message(role = null) {
    const r = this.rng;
    role ??= r.weighted([
      [5, "user"],
      [5, "assistant"],
      [3, "toolResult"],
      [1, "system"],
      [0.5, "bashExecution"],
      [0.5, "custom"],
    ]);
    const nullContent = r.chance(0.04);
    let m;
    switch (role) {
      case "user":
        m = { role, content: r.chance(0.5) ? this.text() : this.textBlocks(), timestamp: this.oldMs() };
        break;
      case "assistant": {
        const content = [];
        if (r.chance(0.3)) content.push({ type: "thinking", thinking: this.text() });
        content.push({ type: "text", text: this.text() });
        for (let i = r.weighted([[3, 0], [2, 1], [1, 2]]); i > 0; i--) content.push({ type: "toolCall", id: `call_${r.int(1e6)}`, name: this.word(TOOLS), arguments: { path: this.text() } });
        m = { role, content, api: "anthropic-messages", provider: this.word(PROVIDERS), model: this.word(MODELS) };
        if (r.chance(0.15)) m.responseModel = this.word(MODELS) + "-20250101";
        if (!this.ex("no-usage", 0.03)) m.usage = this.usage();
        m.stopReason = r.pick(["stop", "toolUse", "length", "aborted"]);
        m.timestamp = this.oldMs();
        break;
      }
      case "toolResult":
        m = { role, toolCallId: `call_${r.int(1e6)}`, toolName: this.word(TOOLS), content: this.textBlocks(), isError: r.chance(0.1), timestamp: this.oldMs() };
        if (r.chance(0.2)) m.usage = this.usage();
        break;
      case "system":
        m = this.systemMessage();
        break;
      case "bashExecution":
        m = { role, command: "ls -la", output: this.text(), exitCode: 0, cancelled: false, truncated: false, timestamp: this.oldMs() };
        break;
      default:
        m = { role: "custom", customType: this.word(CUSTOM_TYPES), content: this.text(), display: true, timestamp: this.oldMs() };
    }
    if (nullContent && "content" in m) m.content = null;
    return m;
  }

  replacement() {
    const r = this.rng;
    return r.weighted([
      [4, () => ({ content: this.text() })],
      [3, () => ({ content: this.textBlocks() })],
      [3, null],
      // Invalid: pi refuses these before looking at the target.
      [0.5, undefined],
      [0.3, () => ({ content: 5 })],
      [0.3, () => ({})],
      [0.3, () => "text"],
      [0.3, () => ({ content: null })],
    ]);
  }

  // ---------- starting files ----------

  /** Entries of a starting file written "by hand" as pi's app writes them (ids 8 hex, as pi's). */
  prefixEntries(count) {
    const r = this.rng;
    const out = [];
    const id = () => {
      if (out.length && this.ex(this.archive ? "duplicate-ids-archive" : "duplicate-ids", 0.08)) return r.pick(out).id;
      return (r.next() >>> 0).toString(16).padStart(8, "0");
    };
    let leaf = null;
    for (let i = 0; i < count; i++) {
      const parentId = r.weighted([
        [20, leaf],
        [3, () => (out.length ? r.pick(out).id : null)],
        [1, null],
        [1, () => `missing${r.int(1000)}`],
      ]);
      const type = r.weighted([
        [12, "message"],
        [1, "thinking_level_change"],
        [2, "model_change"],
        [2, "usage"],
        [2, "compaction"],
        [1, "branch_summary"],
        [1, "custom"],
        [1, "custom_message"],
        [2, "context_edit"],
        [2, "label"],
        [1, "session_info"],
      ]);
      const e = { type, id: id(), parentId, timestamp: this.timestamp() };
      const earlier = () => (out.length ? r.pick(out).id : `missing${r.int(1000)}`);
      switch (type) {
        case "message":
          e.message = this.message();
          break;
        case "thinking_level_change":
          e.thinkingLevel = this.word(THINKING);
          break;
        case "model_change":
          e.provider = this.word(PROVIDERS);
          e.modelId = this.word(MODELS);
          break;
        case "usage":
          Object.assign(e, { kind: r.pick(USAGE_KINDS), provider: this.word(PROVIDERS), model: this.word(MODELS), usage: this.usage() });
          if (r.chance(0.3)) e.note = this.text();
          break;
        case "compaction":
          Object.assign(e, { summary: this.text(), firstKeptEntryId: r.chance(0.9) ? earlier() : e.id, tokensBefore: this.number() });
          if (r.chance(0.3)) e.details = this.json();
          if (r.chance(0.3)) e.usage = this.usage();
          if (r.chance(0.2)) e.fromHook = r.chance(0.5);
          if (r.chance(0.4)) e.systemMessage = this.systemMessage();
          break;
        case "branch_summary":
          Object.assign(e, { fromId: r.chance(0.8) ? earlier() : "root", summary: r.chance(0.9) ? this.text() : "" });
          if (r.chance(0.3)) e.usage = this.usage();
          break;
        case "custom":
          Object.assign(e, { customType: this.word(CUSTOM_TYPES), data: this.json() });
          break;
        case "custom_message":
          Object.assign(e, { customType: this.word(CUSTOM_TYPES), content: r.chance(0.1) ? null : r.chance(0.5) ? this.text() : this.textBlocks(), display: r.chance(0.7) });
          if (r.chance(0.3)) e.details = this.json();
          break;
        case "context_edit": {
          const rep = this.replacement();
          Object.assign(e, { targetId: earlier(), replacement: rep === undefined || typeof rep !== "object" || (rep && (typeof rep.content !== "string" && !Array.isArray(rep.content))) ? null : rep });
          break;
        }
        case "label":
          Object.assign(e, { targetId: earlier(), label: r.chance(0.2) ? "" : this.word(LABELS) });
          if (r.chance(0.05)) delete e.label;
          break;
        default:
          e.name = r.chance(0.8) ? this.word(NAMES) : "";
      }
      // No parent cycle over ids, counting every occurrence of a duplicate id
      // (pi's getBranch or getTree would walk it forever).
      const parents = new Map();
      for (const x of out) parents.set(x.id, [...(parents.get(x.id) ?? []), x.parentId]);
      const todo = [e.parentId];
      const seen = new Set();
      while (todo.length) {
        const cur = todo.pop();
        if (cur === e.id) {
          e.parentId = null;
          break;
        }
        if (cur == null || seen.has(cur)) continue;
        seen.add(cur);
        todo.push(...(parents.get(cur) ?? []));
      }
      out.push(e);
      leaf = e.id;
    }
    return out;
  }

  /** Lines pi skips, to be put between entries. */
  malformedLine() {
    return this.rng.pick(["{not json", '{"type":"message","id":"trunc', "null", "garbage line", "]", '{"type": "message", "id": "x1",}']);
  }

  // ---------- operations ----------

  /**
   * The next operation. `view`: { entries: [{cid, type, role, editable}], leaf, branch: [cid] }
   * from pi's state, canonical.
   */
  next(view, { restart = true } = {}) {
    const r = this.rng;
    const all = view.entries.map((e) => e.cid);
    const branch = view.branch;
    const unknown = () => `nope${this.unknown++}`;
    const anyId = () =>
      r.weighted([
        [6, () => (all.length ? r.pick(all) : unknown())],
        [3, () => (branch.length ? r.pick(branch) : unknown())],
        [1, unknown],
      ]);
    const idOrOdd = () => r.weighted([[12, anyId], [0.5, undefined], [0.5, null], [0.3, ""]]);
    const maybe = (p, f) => (r.chance(p) ? f() : undefined);
    const op = (method, params = {}) => ({ method, params });
    return r.weighted([
      [12, () => op("appendMessage", { message: this.message() })],
      [2, () => op("appendThinkingLevelChange", { thinkingLevel: this.word(THINKING) })],
      [3, () => op("appendModelChange", { provider: this.word(PROVIDERS), modelId: this.word(MODELS) })],
      [3, () => op("appendUsage", { kind: r.pick(USAGE_KINDS), provider: this.word(PROVIDERS), model: this.word(MODELS), usage: this.usage(), note: r.weighted([[2, undefined], [2, () => this.text()], [1, ""]]) })],
      [
        3,
        () =>
          op("appendCompaction", {
            summary: this.text(),
            firstKeptEntryId: r.weighted([[6, () => (branch.length ? r.pick(branch) : unknown())], [2, undefined], [1, () => (all.length ? r.pick(all) : unknown())], [1, unknown]]),
            tokensBefore: this.number(),
            details: maybe(0.4, () => this.json()),
            fromHook: maybe(0.3, () => r.chance(0.5)),
            usage: maybe(0.4, () => this.usage()),
          }),
      ],
      [2, () => op("appendCustomEntry", { customType: this.word(CUSTOM_TYPES), data: maybe(0.9, () => this.json()) })],
      [2, () => op("appendSessionInfo", { name: this.word(NAMES) })],
      [
        2,
        () =>
          op("appendCustomMessageEntry", {
            customType: this.word(CUSTOM_TYPES),
            content: r.chance(0.5) ? this.text() : this.textBlocks(),
            display: r.chance(0.7),
            details: maybe(0.4, () => this.json()),
          }),
      ],
      [
        5,
        () => {
          const editable = view.entries.filter((e) => e.editable && branch.includes(e.cid)).map((e) => e.cid);
          const targetId = r.weighted([[6, () => (editable.length ? r.pick(editable) : anyId())], [3, anyId], [0.3, undefined]]);
          return op("appendContextEdit", { targetId, replacement: this.replacement() });
        },
      ],
      [4, () => op("appendLabelChange", { targetId: idOrOdd(), label: r.weighted([[6, () => this.word(LABELS)], [1, ""], [1, undefined], [0.3, null]]) })],
      [4, () => op("branch", { branchFromId: idOrOdd() })],
      [1, () => op("resetLeaf")],
      [
        3,
        () =>
          op("branchWithSummary", {
            branchFromId: r.weighted([[8, anyId], [2, null], [0.3, undefined]]),
            summary: r.chance(0.9) ? this.text() : "",
            details: maybe(0.3, () => this.json()),
            fromHook: maybe(0.3, () => r.chance(0.5)),
            usage: maybe(0.3, () => this.usage()),
          }),
      ],
      [restart ? 1 : 0, () => op("<restart>")],
      [1, () => op("getLeafId")],
      [1, () => op("getLeafEntry")],
      [2, () => op("getEntry", { id: idOrOdd() })],
      [1, () => op("getEntries")],
      [1, () => op("getEntryCount")],
      [3, () => op("getBranch", r.chance(0.3) ? {} : { fromId: idOrOdd() })],
      [2, () => op("getTree")],
      [2, () => op("getLabel", { id: idOrOdd() })],
      [1, () => op("getSessionName")],
      [1, () => op("getHeader")],
      [0.5, () => op("getSessionId")],
      [0.5, () => op("getCwd")],
      [0.5, () => op("getSessionFile")],
      [2, () => op("getChildren", { parentId: r.weighted([[6, anyId], [1, null], [0.3, undefined]]) })],
      [4, () => op("buildSessionContext")],
      [2, () => op("buildContextEntries")],
      [2, () => op("buildSessionProjection")],
      [2, () => op("getSessionStats")],
      [2, () => op("getUsageCostBreakdown")],
    ]);
  }
}

/** Read queries over a whole session (used on files the other implementation wrote). */
export function readQueries(rng, ids) {
  const q = [
    "getLeafId",
    "getLeafEntry",
    "getEntries",
    "getEntryCount",
    "getBranch",
    "getTree",
    "getHeader",
    "getSessionId",
    "getCwd",
    "getSessionFile",
    "getSessionName",
    "buildSessionContext",
    "buildContextEntries",
    "buildSessionProjection",
    "getSessionStats",
    "getUsageCostBreakdown",
  ].map((method) => ({ method, params: {} }));
  for (const id of rng.shuffle(ids).slice(0, 8)) {
    q.push({ method: "getEntry", params: { id } });
    q.push({ method: "getLabel", params: { id } });
    q.push({ method: "getBranch", params: { fromId: id } });
    q.push({ method: "getChildren", params: { parentId: id } });
  }
  q.push({ method: "getChildren", params: { parentId: null } });
  return q;
}
