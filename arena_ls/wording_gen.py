"""Generate the editors' copies of the clients' words from ``arena_ls/wording.py``.

::

    python -m arena_ls.wording_gen --write    # regenerate the three files below
    python -m arena_ls.wording_gen --check    # exit 1 when one is out of date (CI)

From ``wording.TEXTS`` (each text once, with ``{name}`` placeholders) it writes:

- ``editor-client/vscode/src/core/wording.ts``: the texts and ``say`` (and each
  refusal code's reason, from ``arena_ls/errors.py``), for the
  VS Code extension and AIDE (whose ``lib/core.mjs`` bundles the VS Code core:
  run ``npm run build:core`` in ``editor-client/aide`` after this);
- ``editor-client/nvim/lua/arena/wording.lua``: the same for the Neovim plugin;
- ``tests/editor/fixtures/wording_cases.json``: what ``wording``'s functions say
  for the server answers in ``CASES``, which the VS Code, AIDE and Neovim unit
  tests compare with their own functions' words.

Paths are relative to ``--root`` (default: this checkout's root).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arena_ls import errors, wording

WORDING_TS = Path("editor-client/vscode/src/core/wording.ts")
WORDING_LUA = Path("editor-client/nvim/lua/arena/wording.lua")
WORDING_CASES = Path("tests/editor/fixtures/wording_cases.json")
DEFAULT_ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m arena_ls.wording_gen --write"
NOW = "2026-12-01T16:00:00.000Z"
"""The clock of every case."""

CHECKPOINT = {
    "step": 600,
    "path": "checkpoints/ckpt.pt",
    "at": "2026-12-01T12:55:00.000Z",
    "runId": "tiny-lm-1",
}
OLD_CHECKPOINT = {"step": 300, "path": "ckpt.pt", "at": "2026-12-01T15:54:00.000Z"}
FINISHED_RUN = {
    "runId": "tiny-lm-1",
    "jobId": "tiny-lm",
    "step": 600,
    "totalSteps": 600,
    "endedAt": "2026-12-01T15:48:00Z",
}


def _live(keep_awake: Any) -> dict[str, Any]:
    return {"runId": "r1", "jobId": "tiny-lm", "status": "running", "keepAwake": keep_awake}


def _interrupted(**after: Any) -> dict[str, Any]:
    info = {"policy": "ask", "step": 300, "offer": "Resume from step 300", **after}
    return {"runId": "tiny-lm-2", "jobId": "tiny-lm", "status": "crashed", "afterReboot": info}


KILLED = {
    "stoppedBy": "kill",
    "step": 390,
    "lastCheckpoint": {"step": 300},
    "lost": {"steps": 90, "seconds": 240},
}

CASES: dict[str, list[list[Any]]] = {
    "span": [[0], [0.3], [3.2], [44.5], [59.4], [59.6], [240], [3599], [7500], [None], ["x"]],
    "checkpoint": [[CHECKPOINT], [OLD_CHECKPOINT], [{"step": 7}], [None]],
    "finishedPrompt": [
        ["tiny-lm", FINISHED_RUN],
        ["tiny-lm", {"step": 40}],
        ["tiny-lm", {}],
        ["tiny-lm", None],
    ],
    "mismatchPrompt": [
        ["tiny-lm", {"asked": 50, "lastCheckpoint": CHECKPOINT}],
        ["tiny-lm", {"asked": 50, "lastCheckpoint": None}],
    ],
    "stopPrompt": [
        [{"runtimeSeconds": 3.2}],
        [{"runtimeSeconds": 0}],
        [{"runtimeSeconds": 612}],
        [{"runtimeSeconds": 9000}],
        [{}],
        [{"runtimeSeconds": 5, "lastCheckpoint": OLD_CHECKPOINT, "lost": {"steps": 90, "seconds": 240}}],
        [{"runtimeSeconds": 5, "lastCheckpoint": OLD_CHECKPOINT, "lost": {"steps": None, "seconds": 240}}],
        [{"runtimeSeconds": 5, "lastCheckpoint": OLD_CHECKPOINT, "lost": {"steps": 1, "seconds": 4}}],
    ],
    "lostLine": [
        [
            {
                "stoppedBy": "kill",
                "step": 390,
                "lastCheckpoint": {"step": 300},
                "lost": {"steps": 90, "seconds": 240},
            }
        ],
        [
            {
                "stoppedBy": "file",
                "step": 400,
                "lastCheckpoint": {"step": 400},
                "lost": {"steps": 0, "seconds": 0},
            }
        ],
        [{"stoppedBy": "battery", "step": 12, "lost": {"steps": 12, "seconds": 30}}],
        [{"stoppedBy": "signal", "lost": {"steps": None, "seconds": 95}}],
        [{"stoppedBy": "kill", "step": 5, "lost": {"steps": 0, "seconds": 0}}],
        [{"stoppedBy": "kill", "step": 5, "lost": None}],
    ],
    "stoppedNotice": [
        [{"jobId": "tiny-lm", "status": "stopped", **KILLED}],
        [{"jobId": "tiny-lm", "status": "stopped", "stoppedBy": "file", "lost": None}],
    ],
    "keepAwakeText": [
        [_live(True), None],
        [_live(False), None],
        [_live(None), "no D-Bus session"],
        [_live(None), None],
    ],
    "rebootOffer": [
        [_interrupted()],
        [_interrupted(problem="the pre-flight failed", path="checkpoints/step-300.pt")],
        [_interrupted(offer=None)],
    ],
}
"""Server answers (arguments of each function, the clock aside) whose words every client must agree on."""


def _now() -> _dt.datetime:
    moment = wording.parse_time(NOW)
    if moment is None:
        raise ValueError(f"NOW is not a time: {NOW}")
    return moment


def _keep_awake(run: dict[str, Any], reason: str | None) -> str | None:
    return wording.keep_awake_words(run.get("keepAwake"), reason)


def _reboot_offer(run: dict[str, Any]) -> str | None:
    return wording.reboot_offer_message(run)


FUNCTIONS: dict[str, Callable[..., str | None]] = {
    "span": wording.fmt_span,
    "checkpoint": lambda checkpoint: wording.checkpoint_words(checkpoint, _now()),
    "finishedPrompt": lambda job, run: wording.finished_prompt(job, run, _now()),
    "mismatchPrompt": lambda job, data: wording.mismatch_prompt(job, data, _now()),
    "stopPrompt": lambda data: wording.stop_prompt(data, _now()),
    "lostLine": wording.lost_line,
    "stoppedNotice": wording.stopped_notice,
    "keepAwakeText": _keep_awake,
    "rebootOffer": _reboot_offer,
}


def cases_json() -> str:
    """The cases with what the Python client says for each (null: it says nothing)."""
    cases = [
        {"fn": name, "args": args, "text": FUNCTIONS[name](*args)}
        for name, examples in CASES.items()
        for args in examples
    ]
    return (
        json.dumps({"generatedBy": COMMAND, "now": NOW, "cases": cases}, indent=1, ensure_ascii=False) + "\n"
    )


TS_SAY = """
export type TextKey = keyof typeof TEXTS;

/** The text `key` with its `{name}` placeholders filled; a placeholder without a value throws. */
export function say(key: TextKey, values: Readonly<Record<string, string | number>> = {}): string {
  return TEXTS[key].replace(/\\{(\\w+)\\}/g, (_match: string, name: string) => {
    const value = values[name];
    if (value === undefined) {
      throw new Error(`wording: ${key} needs {${name}}`);
    }
    return String(value);
  });
}
"""


def wording_ts() -> str:
    lines = [
        f"// GENERATED by `{COMMAND}` from arena_ls/wording.py (do not edit).",
        "/** The words every client shows a person for the same event, written once. */",
        "export const TEXTS = {",
        *(f"  {key}: {json.dumps(text, ensure_ascii=False)}," for key, text in wording.TEXTS.items()),
        "} as const;",
        "",
        "/** Each refusal code's reason (arena_ls/errors.py), for a refusal without `data.reason`. */",
        "export const REASONS: Readonly<Record<number, string>> = {",
        *(f"  {code}: {json.dumps(reason)}," for code, reason in errors.REFUSALS),
        "};",
    ]
    return "\n".join(lines) + "\n" + TS_SAY


LUA_SAY = """
--- The text `key` with its `{name}` placeholders filled; a placeholder without a value is an error.
function M.say(key, values)
  local template = M.TEXTS[key]
  if template == nil then
    error("wording: no text " .. tostring(key))
  end
  values = values or {}
  local text = template:gsub("{(%w+)}", function(name)
    local value = values[name]
    if value == nil then
      error("wording: " .. key .. " needs {" .. name .. "}")
    end
    if type(value) == "number" and value == math.floor(value) then
      return string.format("%d", value)
    end
    return tostring(value)
  end)
  return text
end

return M
"""


def _lua_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def wording_lua() -> str:
    lines = [
        f"-- GENERATED by `{COMMAND}` from arena_ls/wording.py (do not edit).",
        "-- arena.nvim: the words every client shows a person for the same event, written once. Pure.",
        "",
        "local M = {}",
        "",
        "M.TEXTS = {",
        *(f"  {key} = {_lua_string(text)}," for key, text in wording.TEXTS.items()),
        "}",
        "",
        "--- Each refusal code's reason (arena_ls/errors.py), for a refusal without `data.reason`.",
        "M.REASONS = {",
        *(f"  [{code}] = {_lua_string(reason)}," for code, reason in errors.REFUSALS),
        "}",
    ]
    return "\n".join(lines) + "\n" + LUA_SAY


def generated() -> dict[Path, str]:
    return {WORDING_TS: wording_ts(), WORDING_LUA: wording_lua(), WORDING_CASES: cases_json()}


def stale_files(root: Path) -> dict[Path, str]:
    """The generated files whose text on disk differs from what they should say."""
    stale = {}
    for relative, text in generated().items():
        path = root / relative
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale[relative] = text
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m arena_ls.wording_gen",
        description="Generate the editors' copies of the clients' words from arena_ls/wording.py.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write the files that are out of date")
    mode.add_argument("--check", action="store_true", help="exit 1 when a file is out of date")
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help=f"the checkout (default: {DEFAULT_ROOT})"
    )
    args = parser.parse_args(argv)
    root: Path = args.root
    try:
        stale = stale_files(root)
    except OSError as error:
        print(f"python -m arena_ls.wording_gen: {error}", file=sys.stderr)
        return 2
    if args.check:
        for relative in stale:
            print(f"{relative} is out of date with arena_ls/wording.py: run {COMMAND}", file=sys.stderr)
        return 1 if stale else 0
    for relative, text in stale.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {relative}", file=sys.stderr)
    if not stale:
        print("the clients' words are up to date", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
