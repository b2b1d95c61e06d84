// pi 1.6 for the tests in this folder (run under Node 22 by scripts/pi16.mjs):
// pi-coding-agent 1.6.0 and its pi-ai, imported by path from tests/pi16
// (ESM ignores NODE_PATH), and an AgentSession on any SessionManager, its
// model pi's faux provider (scripted answers, no network).
import assert from "node:assert/strict";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { repoRoot } from "../helpers.mjs";

export const pi16Modules = join(repoRoot, "tests", "pi16", "node_modules");
const scope = join(pi16Modules, "@earendil-works");

/** pi-coding-agent 1.6.0 (`createAgentSession`, `SessionManager`, …). */
export const pi = await import(pathToFileURL(join(scope, "pi-coding-agent", "dist", "index.js")).href);
/** pi-ai (the faux provider). */
export const ai = await import(pathToFileURL(join(scope, "pi-ai", "dist", "index.js")).href);

/** No discovery: no extensions, skills, prompts or context files; a fixed system prompt. */
function resourceLoader() {
  return {
    getExtensions: () => ({ extensions: [], errors: [], runtime: pi.createExtensionRuntime() }),
    getSkills: () => ({ skills: [], diagnostics: [] }),
    getPrompts: () => ({ prompts: [], diagnostics: [] }),
    getThemes: () => ({ themes: [], diagnostics: [] }),
    getAgentsFiles: () => ({ agentsFiles: [] }),
    getSystemPrompt: () => "You are pi, under test. Tools: read.",
    getSystemPromptSource: () => undefined,
    getAppendSystemPrompt: () => [],
    getAppendSystemPromptSources: () => [],
    extendResources: () => {},
    reload: async () => {},
  };
}

/**
 * A pi 1.6 `AgentSession` on `sessionManager`, working in `dir`, with the
 * `read` tool and the faux provider's model; `faux.setResponses` scripts
 * what the model answers. Compaction keeps as few recent tokens as it can.
 */
export async function agentSession(sessionManager, dir) {
  const faux = ai.fauxProvider({ api: "faux", models: [{ id: "faux-1", contextWindow: 200000, maxTokens: 8000 }] });
  const modelRuntime = await pi.ModelRuntime.create({
    authPath: join(dir, "auth.json"),
    modelsPath: null,
    refreshOnCreate: false,
  });
  modelRuntime.registerNativeProvider(faux.provider);
  const settingsManager = pi.SettingsManager.inMemory({
    compaction: { enabled: false, keepRecentTokens: 1 },
    retry: { enabled: false },
  });
  const { session } = await pi.createAgentSession({
    cwd: dir,
    agentDir: dir,
    model: faux.getModel(),
    thinkingLevel: "off",
    modelRuntime,
    resourceLoader: resourceLoader(),
    settingsManager,
    tools: ["read"],
    sessionManager,
  });
  return { session, faux, modelRuntime };
}

/** JSON as it is stored (`undefined` fields dropped). */
export const plain = (value) => (value === undefined ? undefined : JSON.parse(JSON.stringify(value)));

/** Every read of `ours` answers as pi's `theirs` does. */
export function assertSameReads(ours, theirs) {
  assert.deepEqual(ours.getHeader(), plain(theirs.getHeader()));
  assert.deepEqual(ours.getEntries(), plain(theirs.getEntries()));
  assert.equal(ours.getEntryCount(), theirs.getEntryCount());
  assert.equal(ours.getLeafId(), theirs.getLeafId());
  assert.deepEqual(ours.getLeafEntry(), plain(theirs.getLeafEntry()));
  assert.deepEqual(ours.getBranch(), plain(theirs.getBranch()));
  assert.deepEqual(ours.buildSessionContext(), plain(theirs.buildSessionContext()));
  assert.deepEqual(ours.buildContextEntries(), plain(theirs.buildContextEntries()));
  assert.deepEqual(ours.buildSessionProjection(), plain(theirs.buildSessionProjection()));
  assert.deepEqual(ours.getTree(), plain(theirs.getTree()));
  assert.equal(ours.getSessionName(), theirs.getSessionName());
  assert.equal(ours.getSessionId(), theirs.getSessionId());
  for (const { id } of theirs.getEntries()) {
    assert.deepEqual(ours.getEntry(id), plain(theirs.getEntry(id)), `getEntry ${id}`);
    assert.deepEqual(ours.getBranch(id), plain(theirs.getBranch(id)), `getBranch ${id}`);
    assert.deepEqual(ours.getChildren(id), plain(theirs.getChildren(id)), `getChildren ${id}`);
    assert.equal(ours.getLabel(id), theirs.getLabel(id), `getLabel ${id}`);
  }
  assert.deepEqual(ours.getBranch("nope"), []);
  assert.equal(ours.getEntry("nope"), undefined);
}
