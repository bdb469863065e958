/**
 * The code actions that bring a trainer under arena-ls (contract 8.1), as the
 * extension asks for them. The quick fixes ("Add arena-ls's callback", "Add the
 * trainer kit beside this script", "Resume from --resume_from_checkpoint") come
 * with the other fixes in the light bulb; the source action "Add this trainer
 * to the manifest" is in "Source Action..." and behind the command
 * `arena.addToManifest`.
 */

/** The kind of the server's source action "Add this trainer to the manifest". */
export const ADD_TO_MANIFEST_KIND = "source.arena.addToManifest";

/** The argument of `editor.action.sourceAction` that applies that action alone. */
export function addToManifestArgs(): { kind: string; apply: "first" } {
  return { kind: ADD_TO_MANIFEST_KIND, apply: "first" };
}

/** Whether a file is one the action applies to: a Python script on disk. */
export function canAddToManifest(languageId: string | undefined, scheme: string | undefined): boolean {
  return languageId === "python" && scheme === "file";
}
