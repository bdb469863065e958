import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ADD_TO_MANIFEST_KIND, addToManifestArgs, canAddToManifest } from "../core/adoption";

describe("addToManifestArgs", () => {
  it("asks editor.action.sourceAction for the server's source action alone, and applies it", () => {
    assert.deepEqual(addToManifestArgs(), { kind: "source.arena.addToManifest", apply: "first" });
    assert.equal(ADD_TO_MANIFEST_KIND, "source.arena.addToManifest");
  });
});

describe("canAddToManifest", () => {
  it("is offered on a Python file on disk only", () => {
    assert.equal(canAddToManifest("python", "file"), true);
    assert.equal(canAddToManifest("python", "untitled"), false);
    assert.equal(canAddToManifest("json", "file"), false);
    assert.equal(canAddToManifest(undefined, undefined), false);
  });
});
