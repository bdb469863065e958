// The quick fixes of a blocked job's gate findings, for the AIDE panel (issue 35, item 5): the
// adoption actions ("Add arena-ls's callback", "Add the trainer kit beside this script", the
// resume fixes) and the other gate fixes, as VS Code and Neovim offer them.
//
// The daemon asks arena-ls for the code actions of the job's `blockedBy` findings (the server
// finds each one's fix in a fresh lint of the file as it is now) and applies the one the person
// chose to the files itself: only the job's own trainer, inside the workspace, and a new file
// beside it (the kit), never over an existing one. A suppression (`# arena: ignore[...]`) is
// never offered from the panel: a click must not switch a gate off.
import { randomBytes } from "node:crypto";
import { open, readFile, rename, unlink } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const SUPPRESSION = /^Suppress /;
export const KIT_TITLE = "Add the trainer kit beside this script";
const KIT_FILE = "arena_trainer.py";

/** A `blockedBy` item (`{code, message, uri, range}`) as the LSP diagnostic arena-ls published. */
export function lspDiagnostic(item) {
  return { range: item.range, message: item.message ?? "", code: item.code, source: "arena", severity: 1 };
}

/** Whether the panel offers a code action: an enabled quick fix with an edit, not a suppression. */
export function offerable(action) {
  return (
    action !== null &&
    typeof action === "object" &&
    typeof action.title === "string" &&
    String(action.kind ?? "").split(".")[0] === "quickfix" &&
    !action.disabled &&
    action.edit !== undefined &&
    action.edit !== null &&
    !SUPPRESSION.test(action.title)
  );
}

/**
 * The fixes arena-ls offers for a job's findings: `[{title, codes, edit}]`, one per title (the
 * same fix answers several findings: "Add arena-ls's callback" clears AR001, AR002 and AR009).
 */
export async function fixesFor(client, job) {
  const byUri = new Map();
  for (const item of job.blockedBy ?? []) {
    if (typeof item?.uri === "string" && item.uri.startsWith("file:") && item.range && item.code) {
      byUri.set(item.uri, [...(byUri.get(item.uri) ?? []), item]);
    }
  }
  const fixes = new Map();
  for (const [uri, items] of byUri) {
    const diagnostics = items.map(lspDiagnostic);
    const actions = await client.request("textDocument/codeAction", {
      textDocument: { uri },
      range: diagnostics[0].range,
      context: { diagnostics, only: ["quickfix"], triggerKind: 1 },
    });
    for (const action of actions ?? []) {
      if (!offerable(action)) {
        continue;
      }
      // The kit answers no finding by itself (the server lists them all on it): it goes with the fix that imports it.
      const codes = action.title === KIT_TITLE ? [] : (action.diagnostics ?? diagnostics).map((diagnostic) => String(diagnostic.code));
      const known = fixes.get(action.title);
      if (known) {
        known.codes = [...new Set([...known.codes, ...codes])];
      } else {
        fixes.set(action.title, { title: action.title, codes: [...new Set(codes)], edit: action.edit });
      }
    }
  }
  return [...fixes.values()];
}

/** Whether a fix's edits bring in the kit (`import arena_trainer`, `from arena_trainer import ...`). */
export function importsKit(edit) {
  const texts = [
    ...Object.values(edit?.changes ?? {}).flat(),
    ...(edit?.documentChanges ?? []).flatMap((change) => change.edits ?? []),
  ].map((item) => String(item?.newText ?? ""));
  return texts.some((text) => /\b(?:import|from)\s+arena_trainer\b/.test(text));
}

/** The start of each line of `text`: LSP lines end at `\r\n`, `\n` or `\r`. */
function lineStarts(text) {
  const starts = [0];
  for (let index = 0; index < text.length; index++) {
    const char = text[index];
    if (char === "\r" && text[index + 1] === "\n") {
      index++;
    }
    if (char === "\r" || char === "\n") {
      starts.push(index + 1);
    }
  }
  return starts;
}

/**
 * `text` with LSP `TextEdit`s applied. Positions are UTF-16 code units, which is what a JS string
 * index counts; a position past a line's end stops at it (as LSP says). Overlapping edits throw.
 */
export function applyTextEdits(text, edits) {
  const starts = lineStarts(text);
  const offset = ({ line, character }) => {
    if (!Number.isInteger(line) || !Number.isInteger(character) || line < 0 || character < 0) {
      throw new FixRefused("an edit has a position that is not a line and a character");
    }
    if (line >= starts.length) {
      return text.length;
    }
    const end = line + 1 < starts.length ? starts[line + 1] : text.length;
    const content = text.slice(starts[line], end).replace(/\r?\n$|\r$/, "");
    return starts[line] + Math.min(character, content.length);
  };
  const placed = edits
    .map((edit, order) => ({ start: offset(edit.range.start), end: offset(edit.range.end), text: String(edit.newText ?? ""), order }))
    .sort((a, b) => a.start - b.start || a.end - b.end || a.order - b.order);
  for (let index = 1; index < placed.length; index++) {
    if (placed[index].start < placed[index - 1].end) {
      throw new FixRefused("the fix's edits overlap");
    }
  }
  let result = "";
  let done = 0;
  for (const edit of placed) {
    result += text.slice(done, edit.start) + edit.text;
    done = Math.max(done, edit.end);
  }
  return result + text.slice(done);
}

/** A fix that cannot be applied as it is: nothing was written (the message says why). */
export class FixRefused extends Error {
  constructor(message) {
    super(message);
    this.name = "FixRefused";
  }
}

function inside(root, file) {
  const relative = path.relative(root, file);
  return relative !== "" && !relative.startsWith("..") && !path.isAbsolute(relative);
}

function fileOf(uri) {
  try {
    return path.resolve(fileURLToPath(uri));
  } catch {
    throw new FixRefused(`not a file: ${String(uri).slice(0, 200)}`);
  }
}

/**
 * What a `WorkspaceEdit` does, checked before anything is written: `[{file, create, edits}]`.
 * Only `script` (the job's trainer) may be edited, and only `arena_trainer.py` beside it created.
 */
export function planEdit(edit, { root, script }) {
  const steps = [];
  const edited = (file, edits, create = false) => {
    if (!inside(root, file)) {
      throw new FixRefused(`the fix writes outside the workspace: ${file}`);
    }
    const ownScript = file === script;
    const kitBeside = create && path.dirname(file) === path.dirname(script) && path.basename(file) === KIT_FILE;
    if (!ownScript && !kitBeside) {
      throw new FixRefused(`the fix writes a file other than the job's trainer: ${path.relative(root, file)}`);
    }
    const known = steps.find((step) => step.file === file);
    if (known) {
      known.edits.push(...edits);
    } else {
      steps.push({ file, create, edits: [...edits] });
    }
  };
  for (const [uri, edits] of Object.entries(edit.changes ?? {})) {
    edited(fileOf(uri), edits);
  }
  const created = new Set();
  for (const change of edit.documentChanges ?? []) {
    if (change.kind === "create") {
      if (change.options?.overwrite === true) {
        throw new FixRefused("the fix would overwrite a file");
      }
      created.add(fileOf(change.uri));
      edited(fileOf(change.uri), [], true);
    } else if (change.kind !== undefined) {
      throw new FixRefused(`the fix would ${change.kind} a file`);
    } else {
      const file = fileOf(change.textDocument?.uri);
      edited(file, change.edits ?? [], created.has(file));
    }
  }
  return steps;
}

/** Writes `text` to `file` through a temporary file in its folder and a rename (a kill leaves the old file whole). */
async function replaceFile(file, text) {
  const temporary = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${randomBytes(4).toString("hex")}.tmp`);
  const handle = await open(temporary, "wx");
  try {
    await handle.writeFile(text, "utf8");
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await rename(temporary, file);
  } catch (error) {
    await unlink(temporary).catch(() => {});
    throw error;
  }
}

/** Applies a planned fix: each trainer edited in place atomically, the kit created (never over a file). */
export async function applyPlan(steps) {
  if (new Set(steps.map((step) => step.file)).size !== steps.length) {
    throw new FixRefused("two fixes write the same file: apply them one at a time");
  }
  const texts = [];
  for (const step of steps) {
    if (step.create) {
      texts.push(applyTextEdits("", step.edits));
      continue;
    }
    const text = await readFile(step.file, "utf8");
    if (text.startsWith("\uFEFF")) {
      throw new FixRefused(`${path.basename(step.file)} starts with a byte-order mark: apply this fix in an editor`);
    }
    texts.push(applyTextEdits(text, step.edits));
  }
  for (const [index, step] of steps.entries()) {
    if (step.create) {
      let handle;
      try {
        handle = await open(step.file, "wx");
      } catch (error) {
        if (error.code === "EEXIST") {
          throw new FixRefused(`${path.basename(step.file)} exists already: it is not overwritten`);
        }
        throw error;
      }
      try {
        await handle.writeFile(texts[index], "utf8");
        await handle.sync();
      } finally {
        await handle.close();
      }
    } else {
      await replaceFile(step.file, texts[index]);
    }
  }
  return steps.map((step) => step.file);
}
