// pi 1.6.0's own SessionManager on a session file, driven one JSON request a
// line on stdin, one JSON answer a line on stdout (for tests/cli/merge.rs).
// Requests: {"op":"create","cwd","dir"} (a new session, its file written at
// the first message), {"op":"open","file"} (as pi does on /resume: the file read
// whole, upgraded if old), {"op":"user","text"}, {"op":"label","target",
// "label"}, {"op":"name","name"}, {"op":"state"}. Each answers
// {"ok":true,...} or {"ok":false,"error"}; a write answers its entry id, and
// `state` answers {leafId, ids, labels, name, version}.

import { createInterface } from "node:readline";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const PI16 = resolve(dirname(fileURLToPath(import.meta.url)), "..", "pi16");
const PKG = join(PI16, "node_modules", "@earendil-works", "pi-coding-agent");
// pi's own module (its index re-exports it; importing the index loads all of pi).
const { SessionManager } = await import(pathToFileURL(join(PKG, "dist", "core", "session-manager.js")).href);

let sm = null;
const answer = (v) => process.stdout.write(`${JSON.stringify(v)}\n`);

function handle(req) {
  switch (req.op) {
    case "open":
      sm = SessionManager.open(req.file);
      return {};
    case "create":
      sm = SessionManager.create(req.cwd, req.dir);
      return {};
    case "user":
      return {
        id: sm.appendMessage({ role: "user", content: [{ type: "text", text: req.text }], timestamp: Date.now() }),
      };
    case "label":
      return { id: sm.appendLabelChange(req.target, req.label) };
    case "name":
      return { id: sm.appendSessionInfo(req.name) };
    case "state": {
      const entries = sm.getEntries();
      const labels = {};
      for (const e of entries) {
        const l = sm.getLabel(e.id);
        if (l !== undefined) labels[e.id] = l;
      }
      return {
        leafId: sm.getLeafId(),
        ids: entries.map((e) => e.id),
        labels,
        name: sm.getSessionName() ?? null,
        version: sm.getHeader()?.version ?? null,
        branch: sm.getBranch().map((e) => e.id),
        file: sm.getSessionFile() ?? null,
      };
    }
    default:
      throw new Error(`unknown op ${req.op}`);
  }
}

for await (const line of createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  try {
    answer({ ok: true, ...handle(JSON.parse(line)) });
  } catch (e) {
    answer({ ok: false, error: String(e?.message ?? e) });
  }
}
