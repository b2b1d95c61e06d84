// sessiontree for pi 1.6: an extension that keeps a sessiontree archive in
// step with the session pi is writing, searches the archive from inside pi
// (`/search`, `/sessions`) and gives the model two tools to search and read
// the user's past sessions.
//
// pi's own session file stays the source of truth: the mirror imports it
// into the archive through the Node binding (`archive.importPiFile`), which
// appends only the lines the archive has not seen, on libuv's thread pool.
// The event handlers only note which file to import and return: the import
// runs after them (setImmediate), one at a time, coalescing the events that
// arrive meanwhile, so a turn never waits for the archive and an archive
// that is busy or broken never fails a turn (the error is shown once and the
// next event tries again).
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

/** What the tools and pickers return at most (the tools' descriptions state them). */
export const LIMITS = Object.freeze({
  /** Hits `search_past_sessions` returns. */
  searchHits: 10,
  /** Characters of `search_past_sessions`'s answer. */
  searchChars: 4000,
  /** Messages `read_past_session` returns per call. */
  readMessages: 30,
  /** Characters of `read_past_session`'s answer. */
  readChars: 8000,
  /** Characters of one message in `read_past_session`'s answer. */
  messageChars: 1200,
  /** Hits `/search` offers. */
  commandHits: 30,
  /** Sessions per page of `/sessions`. */
  pageSize: 50,
  /** How long `session_shutdown` waits for the last mirror before pi goes on (ms). */
  shutdownWaitMs: 3000,
});

const here = dirname(fileURLToPath(import.meta.url));

// pi loads extensions through jiti, which would transpile the binding (an ES
// module with top-level await) as it does this file: import it natively.
const nativeImport = new Function("specifier", "return import(specifier)");

/**
 * Where the binding is: `SESSIONTREE_NODE_BINDING` (its index.js), else the
 * `sessiontree` package installed beside this one, else the binding of the
 * repository this package sits in (a checkout, `pi -e ./bindings/pi`).
 */
function bindingPath() {
  const given = process.env.SESSIONTREE_NODE_BINDING;
  if (given) return resolve(given);
  for (let dir = here; ; dir = dirname(dir)) {
    const installed = join(dir, "node_modules", "sessiontree", "index.js");
    if (existsSync(installed)) return installed;
    if (dirname(dir) === dir) break;
  }
  const checkout = join(here, "..", "node", "index.js");
  if (existsSync(checkout)) return checkout;
  throw new Error(
    "the sessiontree binding is not installed: run `npm install` in this package, or set SESSIONTREE_NODE_BINDING to its index.js",
  );
}

let bindingPromise;
function binding() {
  bindingPromise ??= nativeImport(pathToFileURL(bindingPath()).href).catch((e) => {
    bindingPromise = undefined;
    throw e;
  });
  return bindingPromise;
}

const nonEmpty = (v) => (typeof v === "string" && v.trim() !== "" ? v.trim() : undefined);
const expandHome = (p) => (p === "~" ? homedir() : p.startsWith("~/") ? join(homedir(), p.slice(2)) : p);

/**
 * The archive the extension uses: `SESSIONTREE_PI_ARCHIVE`, else the
 * `sessiontree.archive` of pi's settings, else the CLI's (`SESSIONTREE_DB`
 * when it names a file, else `$XDG_DATA_HOME/sessiontree/archive.db` or
 * `~/.local/share/sessiontree/archive.db`, the binding's default).
 */
export function archiveLocation(settings, env = process.env) {
  const chosen =
    nonEmpty(env.SESSIONTREE_PI_ARCHIVE) ??
    nonEmpty(settings?.sessiontree?.archive) ??
    [nonEmpty(env.SESSIONTREE_DB)].find((p) => p !== undefined && !/^postgres(ql)?:\/\//i.test(p));
  return chosen === undefined ? undefined : expandHome(chosen);
}

/** Runs `f`, ignoring what it throws (a context pi has already torn down). */
function quietly(f) {
  try {
    f();
  } catch {
    // The session this context belonged to is gone; nothing to tell.
  }
}

/**
 * The root of pi's sessions directory, as `sessiontree export --out` takes
 * it: above pi's per-directory folder (`--home-me-project--`), else pi's
 * own (a `sessionDir` setting keeps every session in one folder).
 */
function sessionsRoot(ctx) {
  let dir;
  try {
    dir = ctx.sessionManager.getSessionDir();
  } catch {
    dir = undefined;
  }
  if (!dir) return "~/.pi/agent/sessions";
  return basename(dir).startsWith("--") ? dirname(dir) : dir;
}

/** The file pi writes the current session to, if it writes one. */
function sessionFileOf(ctx) {
  try {
    return ctx.sessionManager.getSessionFile();
  } catch {
    return undefined;
  }
}

/**
 * Imports one pi file into the archive, after the event that asked for it,
 * never two at once: events arriving during an import are folded into one
 * more import after it.
 */
class Mirror {
  #open;
  #report;
  #file;
  #again = false;
  #running = null;
  /** What the mirror has done (`/sessiontree` shows it). */
  stats = { imports: 0, entries: 0, failures: 0 };

  constructor(open, report) {
    this.#open = open;
    this.#report = report;
  }

  /** Asks for `file` to be imported; returns at once. */
  request(file) {
    if (!file) return;
    this.#file = file;
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = this.#loop().finally(() => {
      this.#running = null;
    });
  }

  async #loop() {
    // Off the event's path: the handler has returned before any work starts.
    await new Promise((r) => setImmediate(r));
    do {
      this.#again = false;
      const file = this.#file;
      // pi writes its file at the session's first assistant message.
      if (!existsSync(file)) continue;
      try {
        const archive = await this.#open();
        const result = await archive.importPiFile(file);
        this.stats.imports += 1;
        this.stats.entries += result.entries ?? 0;
        this.#report(null);
      } catch (e) {
        this.stats.failures += 1;
        this.#report(e);
      }
    } while (this.#again);
  }

  /** Waits for the imports asked for so far, at most `ms`; true if they finished. */
  async settle(ms = Infinity) {
    if (!this.#running) return true;
    let timer;
    const late = new Promise((r) => {
      if (Number.isFinite(ms)) timer = setTimeout(() => r(false), ms);
    });
    const done = this.#running.then(() => true);
    const finished = await Promise.race([done, late]);
    clearTimeout(timer);
    return finished;
  }
}

const day = (iso) => (typeof iso === "string" ? iso.slice(0, 16).replace("T", " ") : "");
const oneLine = (text, max) => {
  const flat = String(text ?? "").replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
};
// Ids are UUIDv7 in pi 1.6: their head is a clock, their tail tells them apart.
const shortId = (id) => (id.length > 12 ? `…${id.slice(-12)}` : id);

/** The text of one entry of a session, for `read_past_session` (role and text; `undefined` to leave it out). */
function entryText(entry) {
  if (entry.type === "compaction") return { role: "compaction summary", text: entry.summary };
  if (entry.type === "branch_summary") return { role: "branch summary", text: entry.summary };
  if (entry.type === "custom_message") return { role: `message (${entry.customType})`, text: contentText(entry.content) };
  if (entry.type !== "message" || !entry.message) return undefined;
  const m = entry.message;
  if (m.role === "toolResult") return { role: `tool result (${m.toolName ?? "?"})`, text: contentText(m.content) };
  if (m.role === "bashExecution") return { role: "bash", text: `$ ${m.command ?? ""}\n${m.output ?? ""}` };
  return { role: m.role, text: contentText(m.content) };
}

function contentText(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .map((part) => {
      if (part?.type === "text") return part.text;
      if (part?.type === "toolCall") return `[calls ${part.name}(${oneLine(JSON.stringify(part.arguments ?? {}), 200)})]`;
      if (part?.type === "image") return "[image]";
      return "";
    })
    .filter((t) => t)
    .join("\n");
}

/** Appends `line` to `lines` if it fits in `budget` characters; false once it does not. */
function fits(lines, line, budget) {
  const used = lines.reduce((n, l) => n + l.length + 1, 0);
  if (used + line.length + 1 > budget) return false;
  lines.push(line);
  return true;
}

/** The extension: pi calls it once per session runtime. */
export default function sessiontree(pi) {
  let archivePromise;
  // Opened at first use, never in the factory (pi runs factories in
  // invocations that start no session). Relaxed durability: the archive is a
  // copy of pi's files, and an import lost to a power cut is redone by the next.
  const open = () => {
    archivePromise ??= (async () => {
      const { Archive } = await binding();
      let settings;
      try {
        settings = pi.getSettings?.();
      } catch {
        settings = undefined;
      }
      return Archive.open(archiveLocation(settings), { durability: "relaxed" });
    })().catch((e) => {
      archivePromise = undefined;
      throw e;
    });
    return archivePromise;
  };

  let lastCtx;
  let failing = false;
  /** Shows the first failure of a run of them, once, and clears it at the next success. */
  const report = (error) => {
    if (error === null) {
      if (failing) quietly(() => lastCtx?.ui.setStatus("sessiontree", undefined));
      failing = false;
      return;
    }
    if (failing) return;
    failing = true;
    const why = oneLine(error?.message ?? error, 300);
    quietly(() => lastCtx?.ui.notify(`sessiontree: this session is not in the archive yet (${why}); the next turn tries again`, "warning"));
    quietly(() => lastCtx?.ui.setStatus("sessiontree", "archive behind"));
  };
  const mirror = new Mirror(open, report);

  // SESSIONTREE_PI_MIRROR=off keeps the commands and tools but mirrors nothing.
  const mirroring = !/^(off|0|false|no)$/i.test(process.env.SESSIONTREE_PI_MIRROR ?? "");
  const mirrorNow = (_event, ctx) => {
    lastCtx = ctx;
    if (mirroring) mirror.request(sessionFileOf(ctx));
  };
  pi.on("turn_end", mirrorNow);
  pi.on("session_tree", mirrorNow);
  pi.on("session_compact", mirrorNow);
  pi.on("session_shutdown", async (_event, ctx) => {
    mirrorNow(_event, ctx);
    // The last lines pi wrote, before pi exits or replaces the session;
    // bounded, so a busy archive never holds pi up for long.
    await mirror.settle(LIMITS.shutdownWaitMs);
  });

  /** Opens an archived session in pi, through the pi file it was imported from. */
  async function openSession(ctx, id, file) {
    if (!file) {
      ctx.ui.notify(
        `Session ${id} has no pi file on disk: \`sessiontree export ${id} --out ${sessionsRoot(ctx)}\` writes one; \`sessiontree import\` then records it, and it opens from here`,
        "warning",
      );
      return;
    }
    if (file === sessionFileOf(ctx)) {
      ctx.ui.notify("That is the session you are in", "info");
      return;
    }
    await ctx.switchSession(file);
  }

  pi.registerCommand("search", {
    description: "Search every archived session (sessiontree) and open one: /search WORDS",
    handler: async (args, ctx) => {
      let query = nonEmpty(args);
      if (query === undefined) query = nonEmpty(await ctx.ui.input("Search the archive", "words to find"));
      if (query === undefined) return;
      const archive = await open();
      let hits;
      try {
        hits = await archive.search(query, { limit: LIMITS.commandHits });
      } catch (e) {
        ctx.ui.notify(`sessiontree: ${e.message}`, "error");
        return;
      }
      if (hits.length === 0) {
        ctx.ui.notify(`No archived session matches "${query}"`, "info");
        return;
      }
      const files = await archive.sourceFiles(new Set(hits.map((h) => h.sessionId)));
      const labels = hits.map(
        (h, i) =>
          `${i + 1}. ${day(h.sessionCreatedAt)}  ${oneLine(h.sessionName ?? shortId(h.sessionId), 40)}  ${h.role}: ${oneLine(h.snippet, 120)}`,
      );
      const choice = await ctx.ui.select(`${hits.length} hits for "${query}"`, labels);
      const hit = hits[labels.indexOf(choice)];
      if (hit === undefined) return;
      await openSession(ctx, hit.sessionId, files[hit.sessionId]);
    },
  });

  const MORE = "… more sessions";
  pi.registerCommand("sessions", {
    description: "Open an archived session (sessiontree): this directory's; /sessions all for every directory; /sessions TEXT by name",
    handler: async (args, ctx) => {
      const arg = nonEmpty(args);
      const filter = arg === "all" ? {} : arg !== undefined ? { nameContains: arg } : { cwd: ctx.cwd };
      const where = arg === "all" ? "all directories" : arg !== undefined ? `named like "${arg}"` : ctx.cwd;
      const archive = await open();
      for (let offset = 0; ; offset += LIMITS.pageSize) {
        const page = await archive.listSessions({ ...filter, limit: LIMITS.pageSize + 1, offset });
        const shown = page.slice(0, LIMITS.pageSize);
        if (shown.length === 0) {
          ctx.ui.notify(`No archived sessions (${where})`, "info");
          return;
        }
        const labels = shown.map(
          (s, i) =>
            `${offset + i + 1}. ${day(s.lastActiveAt ?? s.createdAt)}  ${oneLine(s.name ?? shortId(s.id), 60)}  ${s.entryCount} entries${arg === undefined ? "" : `  ${s.cwd ?? ""}`}${s.sourceFile ? "" : "  (no pi file)"}`,
        );
        if (page.length > LIMITS.pageSize) labels.push(MORE);
        const choice = await ctx.ui.select(`Archived sessions, ${where}`, labels);
        if (choice === MORE) continue;
        const session = shown[labels.indexOf(choice)];
        if (session === undefined) return;
        await openSession(ctx, session.id, session.sourceFile);
        return;
      }
    },
  });

  pi.registerTool({
    name: "search_past_sessions",
    label: "Search past sessions",
    description:
      "Full-text search over all of the user's past pi sessions (every project; the sessiontree archive). " +
      `Returns at most ${LIMITS.searchHits} hits and ${LIMITS.searchChars} characters, best first: ` +
      "session id, date, name, the message's role and a snippet with the match in [brackets]. " +
      "Read a hit's session with read_past_session.",
    promptSnippet: "Search the user's past pi sessions (memory across sessions)",
    promptGuidelines: [
      "Use search_past_sessions when the user refers to earlier work, a past conversation or a decision that is not in this session; read a hit with read_past_session.",
    ],
    parameters: {
      type: "object",
      properties: {
        query: {
          type: "string",
          description: 'Words to find (SQLite FTS5: words, "a phrase", a OR b, prefix*)',
        },
        limit: {
          type: "integer",
          minimum: 1,
          description: `Hits to return (${LIMITS.searchHits}, the default, at most: more are cut to ${LIMITS.searchHits})`,
        },
      },
      required: ["query"],
      additionalProperties: false,
    },
    async execute(_toolCallId, params) {
      const limit = Math.max(1, Math.min(LIMITS.searchHits, Math.trunc(params.limit ?? LIMITS.searchHits)));
      const archive = await open();
      const hits = await archive.search(String(params.query), { limit });
      const lines = [];
      let shown = 0;
      for (const h of hits) {
        const line = `- session ${h.sessionId} (${day(h.sessionCreatedAt)}${h.sessionName ? `, "${oneLine(h.sessionName, 80)}"` : ""}) ${h.role}: ${oneLine(h.snippet, 400)}`;
        if (!fits(lines, line, LIMITS.searchChars - 200)) break;
        shown += 1;
      }
      const head =
        hits.length === 0
          ? `No past session matches ${JSON.stringify(params.query)}.`
          : `${shown} of ${hits.length} hits for ${JSON.stringify(params.query)}${shown < hits.length ? " (the rest cut to fit)" : ""}:`;
      return {
        content: [{ type: "text", text: [head, ...lines].join("\n") }],
        details: { hits: hits.slice(0, shown).map(({ sessionId, entryId, role }) => ({ sessionId, entryId, role })) },
      };
    },
  });

  pi.registerTool({
    name: "read_past_session",
    label: "Read a past session",
    description:
      "Reads one of the user's past pi sessions from the sessiontree archive (a session id from search_past_sessions): " +
      "its name, date and directory, then the messages of its current branch, oldest first, from `offset`. " +
      `At most ${LIMITS.readMessages} messages and ${LIMITS.readChars} characters per call, each message cut to ${LIMITS.messageChars} characters; ` +
      "the answer says the offset to read on from.",
    promptSnippet: "Read one of the user's past pi sessions by id",
    parameters: {
      type: "object",
      properties: {
        sessionId: { type: "string", description: "The session's id" },
        offset: { type: "integer", minimum: 0, description: "Messages to skip (default 0)" },
      },
      required: ["sessionId"],
      additionalProperties: false,
    },
    async execute(_toolCallId, params) {
      const archive = await open();
      const storage = await archive.storage(String(params.sessionId));
      try {
        const [metadata, name, branch] = await Promise.all([
          storage.getMetadata(),
          storage.getSessionName(),
          storage.request("getBranch", {}),
        ]);
        const messages = branch.map(entryText).filter((m) => m !== undefined && m.text.trim() !== "");
        const offset = Math.max(0, Math.trunc(params.offset ?? 0));
        const head = `Session ${metadata.id}${name ? ` "${oneLine(name, 100)}"` : ""}, created ${day(metadata.createdAt)}, in ${metadata.cwd ?? "?"}: ${messages.length} messages.`;
        const lines = [head];
        let next = offset;
        while (next < messages.length && next - offset < LIMITS.readMessages) {
          const { role, text } = messages[next];
          const cut = text.length > LIMITS.messageChars ? `${text.slice(0, LIMITS.messageChars)}… [cut]` : text;
          if (!fits(lines, `[${next}] ${role}: ${cut}`, LIMITS.readChars - 120)) break;
          next += 1;
        }
        lines.push(
          next < messages.length
            ? `(${messages.length - next} more messages: read_past_session with offset ${next})`
            : "(end of the session)",
        );
        return {
          content: [{ type: "text", text: lines.join("\n") }],
          details: { sessionId: metadata.id, offset, next, total: messages.length },
        };
      } finally {
        await storage.close();
      }
    },
  });

  pi.registerCommand("sessiontree", {
    description: "Where the sessiontree archive is and what the mirror has done in this session",
    handler: async (_args, ctx) => {
      await mirror.settle(LIMITS.shutdownWaitMs);
      let where;
      try {
        where = (await open()).path;
      } catch (e) {
        where = `not open (${oneLine(e.message, 200)})`;
      }
      const { imports, entries, failures } = mirror.stats;
      ctx.ui.notify(
        `sessiontree archive: ${where}; this session: ${imports} imports, ${entries} entries mirrored, ${failures} failed attempts`,
        "info",
      );
    },
  });
}
