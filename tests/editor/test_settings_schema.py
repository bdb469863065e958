"""Settings are declared once (arena_ls/settings.py) and the editors' declarations are generated.

``python -m arena_ls.settings_schema --write`` writes VS Code's package.json
properties, ``src/core/settingsTable.ts`` and the Neovim plugin's
``arena/server_defaults.lua`` from the server's declarations. Checked here:

- what is committed is what the generator writes (CI runs ``--check`` too);
- a change in settings.py without regenerating fails ``--check``, and
  ``--write`` brings exactly that change into the three files (run on a
  copy of the package, in a subprocess, as a developer would);
- each declaration's JSON-schema half accepts exactly what its server check
  accepts (VS Code's settings editor must not refuse what the server takes,
  nor offer what it refuses), and every default passes its own schema;
- every field of the settings classes is declared (a field without a
  declaration is a setting no client can set).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arena_ls import settings as server
from arena_ls import settings_schema
from arena_ls.setting_decl import declared_settings, undeclared_fields

REPO = Path(__file__).resolve().parents[2]
EXTENSION = REPO / "editor-client" / "vscode"
SECTION = "arena."

SCHEMA_WORDS = {
    "type",
    "items",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "default",
    "scope",
    "description",
    "markdownDescription",
    "additionalProperties",
    "properties",
}
"""The JSON-schema words ``_schema_accepts`` understands (a declaration using another fails)."""

PROBES: tuple[Any, ...] = (
    None,
    True,
    False,
    -1,
    0,
    0.5,
    1,
    2,
    2.5,
    50,
    100,
    100.5,
    10**9,
    "",
    "x",
    "error",
    "warn",
    "off",
    [],
    ["py", "-3"],
    [1],
    {},
    {"AR010": "error"},
    {"AR999": "error"},
)
"""Values offered to both the declaration and the server for each key."""


def declared() -> dict[str, dict[str, Any]]:
    """package.json's settings as committed, by key without the ``arena.`` prefix."""
    package = json.loads((EXTENSION / "package.json").read_text(encoding="utf-8"))
    properties: dict[str, dict[str, Any]] = package["contributes"]["configuration"]["properties"]
    assert all(key.startswith(SECTION) for key in properties), sorted(properties)
    return {key.removeprefix(SECTION): schema for key, schema in properties.items()}


def server_accepts(key: str, value: Any) -> bool:
    _settings, problems = server.parse_settings({key: value})
    return not problems


def extension_drops(key: str, value: Any) -> bool:
    """What ``serverSettings`` in settings.ts leaves out (the server then keeps its default)."""
    if value is None:
        return key not in server_null_keys()
    if isinstance(value, str) and not value.strip():
        return True
    if key == "python" and isinstance(value, list) and not [part for part in value if str(part).strip()]:
        return True  # an empty argument list: "the server's own interpreter"
    return value == {}


def server_null_keys() -> set[str]:
    return {key for key in server._FIELDS if server_accepts(key, None)}


def _is_type(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise AssertionError(f"unknown JSON type {name!r}")


def _schema_accepts(schema: dict[str, Any], value: Any) -> bool:
    """JSON-schema validation of the words in ``SCHEMA_WORDS`` (what VS Code's settings editor checks)."""
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if not any(_is_type(value, name) for name in types):
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    items = schema.get("items")
    if isinstance(value, list) and items and not all(_schema_accepts(items, item) for item in value):
        return False
    if isinstance(value, dict) and not _object_accepts(schema, value):
        return False
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return False
        if "maximum" in schema and value > schema["maximum"]:
            return False
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return False
    return True


def _object_accepts(schema: dict[str, Any], value: dict[str, Any]) -> bool:
    """``properties`` and ``additionalProperties`` (false, or a schema every other member must pass)."""
    known = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for name, member in value.items():
        if name in known:
            if not _schema_accepts(known[name], member):
                return False
        elif extra is False or (isinstance(extra, dict) and not _schema_accepts(extra, member)):
            return False
    return True


# -- the generated files ------------------------------------------------------------------


def test_the_committed_files_are_what_the_generator_writes() -> None:
    stale = settings_schema.stale_files(REPO)
    assert not stale, (
        f"out of date: {sorted(map(str, stale))}; run python -m arena_ls.settings_schema --write"
    )


def test_check_exits_0_on_this_checkout() -> None:
    assert settings_schema.main(["--check", "--root", str(REPO)]) == 0


def _copy_checkout(tmp_path: Path) -> Path:
    """The package and the three generated files, as a checkout of their own under ``tmp_path``."""
    root = tmp_path / "checkout"
    shutil.copytree(REPO / "arena_ls", root / "arena_ls", ignore=shutil.ignore_patterns("__pycache__"))
    for relative in settings_schema.GENERATED:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, root / relative)
    return root


def _generator(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "arena_ls.settings_schema", *args, "--root", str(root)]
    return subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
    )


NEW_FIELD = """    watchdog_stall_seconds: float = setting(
        "watchdog.stallSeconds","""
ADDED_SETTING = """    logs_test_only_mb: float = setting(
        "logs.testOnlyMb",
        7.5,
        _POSITIVE,
        "A setting added by the test, to see it reach every editor.",
    )
"""


def test_a_setting_added_without_regenerating_fails_the_check_and_write_brings_it(tmp_path: Path) -> None:
    root = _copy_checkout(tmp_path)
    source = root / "arena_ls" / "settings.py"
    text = source.read_text(encoding="utf-8")
    assert NEW_FIELD in text
    source.write_text(text.replace(NEW_FIELD, ADDED_SETTING + NEW_FIELD), encoding="utf-8")
    before = {
        relative: (root / relative).read_text(encoding="utf-8") for relative in settings_schema.GENERATED
    }

    check = _generator(root, "--check")
    assert check.returncode == 1, check.stderr
    for relative in settings_schema.GENERATED:
        assert f"{relative} is out of date" in check.stderr, check.stderr

    written = _generator(root, "--write")
    assert written.returncode == 0, written.stderr
    assert _generator(root, "--check").returncode == 0

    package = json.loads((root / settings_schema.PACKAGE_JSON).read_text(encoding="utf-8"))
    added = package["contributes"]["configuration"]["properties"]["arena.logs.testOnlyMb"]
    assert added["default"] == 7.5 and added["exclusiveMinimum"] == 0 and added["type"] == "number"
    assert added["description"] == "A setting added by the test, to see it reach every editor."
    old_package = json.loads(before[settings_schema.PACKAGE_JSON])
    del package["contributes"]["configuration"]["properties"]["arena.logs.testOnlyMb"]
    assert package == old_package, "only the new property may change in package.json"
    table = (root / settings_schema.SETTINGS_TS).read_text(encoding="utf-8")
    assert '  "logs.testOnlyMb",\n' in table and '"logs.testOnlyMb": 7.5,' in table
    lua = (root / settings_schema.NVIM_DEFAULTS).read_text(encoding="utf-8")
    assert '["logs.testOnlyMb"] = 7.5,' in lua


def test_a_changed_default_without_regenerating_fails_the_check(tmp_path: Path) -> None:
    root = _copy_checkout(tmp_path)
    source = root / "arena_ls" / "setting_sections.py"
    text = source.read_text(encoding="utf-8")
    declaration = '"preflight.minFreeRamMb", 5120,'
    assert declaration in text
    source.write_text(text.replace(declaration, '"preflight.minFreeRamMb", 4096,'), encoding="utf-8")
    check = _generator(root, "--check")
    assert check.returncode == 1
    assert (
        "package.json is out of date" in check.stderr and "server_defaults.lua is out of date" in check.stderr
    )
    assert _generator(root, "--write").returncode == 0
    package = json.loads((root / settings_schema.PACKAGE_JSON).read_text(encoding="utf-8"))
    assert (
        package["contributes"]["configuration"]["properties"]["arena.preflight.minFreeRamMb"]["default"]
        == 4096
    )


def test_a_hand_edit_of_a_generated_file_fails_the_check(tmp_path: Path) -> None:
    root = _copy_checkout(tmp_path)
    table = root / settings_schema.SETTINGS_TS
    table.write_text(table.read_text(encoding="utf-8").replace('  "clusters",\n', ""), encoding="utf-8")
    (root / settings_schema.NVIM_DEFAULTS).unlink()
    assert settings_schema.main(["--check", "--root", str(root)]) == 1
    assert set(settings_schema.stale_files(root)) == {
        settings_schema.SETTINGS_TS,
        settings_schema.NVIM_DEFAULTS,
    }
    assert settings_schema.main(["--write", "--root", str(root)]) == 0
    assert settings_schema.stale_files(root) == {}


@pytest.mark.parametrize("broken", ["", "[]", '{"contributes": {}}', "{not json"])
def test_a_broken_package_json_is_named_and_nothing_is_written(
    tmp_path: Path, broken: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy_checkout(tmp_path)
    (root / settings_schema.PACKAGE_JSON).write_text(broken, encoding="utf-8")
    (root / settings_schema.NVIM_DEFAULTS).unlink()
    assert settings_schema.main(["--write", "--root", str(root)]) == 2
    assert "package.json must be a JSON object with contributes.configuration" in capsys.readouterr().err
    assert (root / settings_schema.PACKAGE_JSON).read_text(encoding="utf-8") == broken
    assert not (root / settings_schema.NVIM_DEFAULTS).exists(), "a failed run writes nothing"


def test_a_key_declared_twice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    twice = (*server.EDITOR_SETTINGS, server.EDITOR_SETTINGS[0])
    monkeypatch.setattr(server, "EDITOR_SETTINGS", twice)
    with pytest.raises(ValueError, match="declared twice"):
        settings_schema.entries()


def test_settings_ts_takes_its_lists_from_the_generated_table() -> None:
    source = (EXTENSION / "src" / "core" / "settings.ts").read_text(encoding="utf-8")
    assert 'from "./settingsTable"' in source
    assert '"preflight.minFreeRamMb"' not in source, "settings.ts must not keep a list of its own"


# -- the declarations ----------------------------------------------------------------------


def test_every_settings_field_is_declared() -> None:
    assert undeclared_fields(server.Settings()) == []


def test_every_server_key_is_declared_for_vscode_and_sent() -> None:
    server_keys = {entry.declared.key for entry in settings_schema.entries() if entry.for_server}
    assert server_keys == set(server._FIELDS) | {"clusters"}
    editor_keys = {declared.key for declared in server.EDITOR_SETTINGS}
    assert set(declared()) == server_keys | editor_keys
    table = (EXTENSION / "src" / "core" / "settingsTable.ts").read_text(encoding="utf-8")
    sent = table.split("export const SERVER_SETTING_KEYS = [")[1].split("]")[0]
    assert {line.strip().strip('",') for line in sent.splitlines() if line.strip()} == server_keys


def _server_default(key: str) -> Any:
    for found in declared_settings(server.Settings()):
        if found.declared.key == key:
            return settings_schema.as_json(found.default)
    raise KeyError(key)


@pytest.mark.parametrize("key", sorted(server._FIELDS))
def test_the_declared_default_is_the_servers_and_passes_its_schema(key: str) -> None:
    default = declared()[key]["default"]
    if key == "python":
        # The server's default is its own interpreter (machine-dependent); the
        # extension declares null, which it leaves out, so the server keeps it.
        assert default is None and extension_drops(key, default)
        assert _schema_accepts(declared()[key], default)
        return
    expected = _server_default(key)
    assert default == expected, (default, expected)
    assert isinstance(default, bool) == isinstance(expected, bool), (default, expected)
    assert _schema_accepts(declared()[key], default)
    assert server_accepts(key, default)


@pytest.mark.parametrize("key", sorted(server._FIELDS))
def test_the_declared_type_and_range_accept_what_the_server_accepts(key: str) -> None:
    schema = declared()[key]
    assert set(schema) <= SCHEMA_WORDS, set(schema) - SCHEMA_WORDS
    values = [*PROBES, *schema.get("enum", [])]
    for bound in ("minimum", "maximum", "exclusiveMinimum"):
        if bound in schema:
            values += [schema[bound] - 0.5, schema[bound], schema[bound] + 0.5]
            values += [schema[bound] - 1, schema[bound] + 1]
    disagreements = [
        (value, _schema_accepts(schema, value), server_accepts(key, value))
        for value in values
        if not extension_drops(key, value) and _schema_accepts(schema, value) != server_accepts(key, value)
    ]
    assert not disagreements, f"arena.{key}: (value, VS Code accepts, server accepts): {disagreements}"


def test_null_is_sent_exactly_for_the_keys_whose_null_the_server_takes() -> None:
    table = (EXTENSION / "src" / "core" / "settingsTable.ts").read_text(encoding="utf-8")
    listed = table.split("export const NULL_IS_A_VALUE_KEYS: readonly string[] = [")[1].split("]")[0]
    sent = {line.strip().strip('",') for line in listed.splitlines() if line.strip()}
    assert sent == server_null_keys() == {"device.fp32Only", "insights.thermalMaxCelsius", "notify.command"}
    for key in sent:
        assert _schema_accepts(declared()[key], None), f"arena.{key} must declare null"


def _readme_default(value: Any) -> str:
    """A default as editor-client/README.md's settings table shows it (strings without quotes)."""
    return value if isinstance(value, str) else json.dumps(value)


def test_the_readme_table_lists_every_setting_with_its_default() -> None:
    """editor-client/README.md's settings table is prose; its keys and defaults may not drift."""
    readme = (REPO / "editor-client" / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `arena\.([\w.]+)` \| `([^`]*)` \|", readme, re.MULTILINE))
    expected = {key: _readme_default(schema["default"]) for key, schema in declared().items()}
    assert rows == expected


def test_every_description_is_a_sentence_for_the_settings_ui() -> None:
    for key, schema in declared().items():
        text = schema.get("description") or schema.get("markdownDescription") or ""
        assert len(text) >= 20 and text.rstrip().endswith((".", ")")), f"arena.{key}: {text!r}"
