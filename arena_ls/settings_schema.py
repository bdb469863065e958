"""Generate the editors' declarations of the settings from ``arena_ls/settings.py``.

::

    python -m arena_ls.settings_schema --write    # regenerate the three files below
    python -m arena_ls.settings_schema --check    # exit 1 when one is out of date (CI)

From the settings declared once in ``settings.py`` (each field's key, default,
kind and description, and ``EDITOR_SETTINGS``) it writes:

- ``editor-client/vscode/package.json``: ``contributes.configuration.properties``
  (only that member; the rest of the file is kept as it is);
- ``editor-client/vscode/src/core/settingsTable.ts``: the keys the extension
  sends the server, those whose null it sends, and every default;
- ``editor-client/nvim/lua/arena/server_defaults.lua``: the server's defaults,
  for the Neovim plugin.

Paths are relative to ``--root`` (default: this checkout's root).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from arena_ls import settings
from arena_ls.setting_decl import FIELD_DEFAULT, Declared, declared_settings

SECTION = "arena"
PACKAGE_JSON = Path("editor-client/vscode/package.json")
SETTINGS_TS = Path("editor-client/vscode/src/core/settingsTable.ts")
NVIM_DEFAULTS = Path("editor-client/nvim/lua/arena/server_defaults.lua")
DEFAULT_ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python -m arena_ls.settings_schema --write"
SCHEMA_ORDER = ("type", "items", "enum", "minimum", "maximum", "exclusiveMinimum")
"""Schema words written before the default, in this order (the others after it)."""


class GeneratorError(Exception):
    """A generated file that cannot be regenerated as it is (nothing is written then)."""


@attrs.frozen
class Entry:
    """A setting as the editors declare it: its declaration, its default, whether the server reads it."""

    declared: Declared
    default: Any
    for_server: bool


def as_json(value: Any) -> Any:
    """A default as JSON carries it: tuples as lists, mappings as objects, ``50.0`` as ``50``."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, Mapping):
        return {str(key): as_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    raise TypeError(f"a setting's default must be JSON: {value!r}")


def entries() -> list[Entry]:
    """The editors' own settings first, then the server's in the order they are declared."""
    found = [
        Entry(declared, as_json(declared.editor_default), False) for declared in settings.EDITOR_SETTINGS
    ]
    for item in declared_settings(settings.Settings()):
        declared = item.declared
        default = item.default if declared.editor_default is FIELD_DEFAULT else declared.editor_default
        found.append(Entry(declared, as_json(default), True))
    keys = [entry.declared.key for entry in found]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    if duplicates:
        raise ValueError(f"settings declared twice: {duplicates}")
    return found


def null_is_a_value(entry: Entry) -> bool:
    """The server takes null for this key ("decide for me"): an editor sends it rather than leave it out."""
    check = entry.declared.check
    return entry.for_server and check is not None and check.accepts(None)


def vscode_property(entry: Entry) -> dict[str, Any]:
    """One ``contributes.configuration.properties`` member."""
    declared = entry.declared
    schema = dict(declared.schema)
    if entry.default is None and "null" not in _types(schema):
        schema["type"] = [*_types(schema), "null"]
    prop: dict[str, Any] = {word: schema.pop(word) for word in SCHEMA_ORDER if word in schema}
    prop["default"] = entry.default
    prop["scope"] = declared.scope
    prop.update(schema)
    prop["markdownDescription" if declared.markdown else "description"] = declared.description
    return prop


def _types(schema: Mapping[str, Any]) -> list[str]:
    types = schema["type"]
    return list(types) if isinstance(types, (list, tuple)) else [types]


def properties() -> dict[str, dict[str, Any]]:
    return {f"{SECTION}.{entry.declared.key}": vscode_property(entry) for entry in entries()}


def render_package_json(current: str) -> str:
    """``current`` (package.json's text) with its settings properties regenerated."""
    try:
        package = json.loads(current)
        configuration = package["contributes"]["configuration"]
    except (ValueError, KeyError, TypeError) as error:
        raise GeneratorError(
            f"{PACKAGE_JSON} must be a JSON object with contributes.configuration ({error!r})"
        ) from error
    configuration["properties"] = properties()
    return json.dumps(package, indent=2, ensure_ascii=False) + "\n"


def _ts_list(name: str, values: Iterable[str], annotation: str = "") -> list[str]:
    lines = [f"export const {name}{annotation} = ["]
    lines += [f"  {json.dumps(value)}," for value in values]
    lines.append("] as const;" if not annotation else "];")
    return lines


def render_settings_ts(_current: str = "") -> str:
    """``settingsTable.ts``: what ``settings.ts`` needs to know of each setting."""
    server = [entry for entry in entries() if entry.for_server]
    lines = [
        f"// GENERATED by `{COMMAND}` from arena_ls/settings.py (do not edit).",
        "",
        "/** The server's settings (contract section 5), as dotted keys of the `arena` section. */",
        *_ts_list("SERVER_SETTING_KEYS", (entry.declared.key for entry in server)),
        "",
        '/** Keys whose null the server takes ("decide for me"), so a null is sent rather than left out. */',
        *_ts_list(
            "NULL_IS_A_VALUE_KEYS",
            (entry.declared.key for entry in server if null_is_a_value(entry)),
            ": readonly string[]",
        ),
        "",
        '/** Every setting\'s declared default (null: the server picks its own, or "decide for me"). */',
        "export const SETTING_DEFAULTS = {",
        *(f"  {json.dumps(entry.declared.key)}: {_ts_value(entry.default)}," for entry in entries()),
        "} as const;",
        "",
    ]
    return "\n".join(lines)


def _ts_value(value: Any) -> str:
    if isinstance(value, (list, dict)) and not value:
        return "[]" if isinstance(value, list) else "{}"
    return json.dumps(value, ensure_ascii=False)


def _lua_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "{ " + ", ".join(_lua_value(item) for item in value) + " }" if value else "{}"
    if isinstance(value, dict) and not value:
        return "vim.empty_dict()"
    raise TypeError(f"no Lua form for the default {value!r}")


def render_nvim_defaults(_current: str = "") -> str:
    """``server_defaults.lua``: the server's defaults by dotted key (a null default is absent)."""
    lines = [
        f"-- GENERATED by `{COMMAND}` from arena_ls/settings.py (do not edit).",
        "-- The server's settings and their defaults, by dotted key; a setting whose",
        "-- default is null (the server decides) is absent.",
        "return {",
    ]
    for entry in entries():
        if entry.for_server and entry.default is not None:
            lines.append(f"  [{json.dumps(entry.declared.key)}] = {_lua_value(entry.default)},")
    lines += ["}", ""]
    return "\n".join(lines)


GENERATED: dict[Path, Callable[[str], str]] = {
    PACKAGE_JSON: render_package_json,
    SETTINGS_TS: render_settings_ts,
    NVIM_DEFAULTS: render_nvim_defaults,
}
"""Each generated file and how its new text is made from its current text."""


def stale_files(root: Path) -> dict[Path, str]:
    """The generated files whose text under ``root`` differs from what would be written, with that text."""
    stale = {}
    for relative, render in GENERATED.items():
        path = root / relative
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        wanted = render(current)
        if current != wanted:
            stale[relative] = wanted
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m arena_ls.settings_schema",
        description="Generate the editors' settings declarations from arena_ls/settings.py.",
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
    except (GeneratorError, OSError) as error:
        print(f"python -m arena_ls.settings_schema: {error}", file=sys.stderr)
        return 2
    if args.check:
        for relative in stale:
            print(f"{relative} is out of date with arena_ls/settings.py: run {COMMAND}", file=sys.stderr)
        return 1 if stale else 0
    for relative, text in stale.items():
        (root / relative).write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {relative}", file=sys.stderr)
    if not stale:
        print("the settings declarations are up to date", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
