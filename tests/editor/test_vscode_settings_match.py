"""The VS Code extension declares and forwards every server setting, with the server's defaults.

The extension sends the server only the keys in ``SERVER_SETTING_KEYS``
(editor-client/vscode/src/core/settings.ts), and VS Code lets a user set only
what ``contributes.configuration.properties`` of its package.json declares. A
server setting missing from either cannot be set from VS Code, so both are
checked here against the server's own table (``arena_ls.settings``), not
against a copy of it: a new server setting without its VS Code declaration
fails this test. Plain file reading, no Node needed.

Beyond the names: each declared default is the server's default, the declared
type and bounds accept exactly what the server accepts (probed through
``parse_settings``), and the keys whose null the extension sends
(``NULL_IS_A_VALUE``) are exactly those whose null the server takes.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import attrs
import pytest

from arena_ls import settings as server

REPO = Path(__file__).resolve().parents[2]
EXTENSION = REPO / "editor-client" / "vscode"
SECTION = "arena."

CLIENT_ONLY = {"interpreter", "serverArgs", "trace.server", "showRawLines"}
"""Declared settings the extension itself uses; never sent to the server."""

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
)
"""Values offered to both the declaration and the server for each key."""


@cache
def declared() -> dict[str, dict[str, Any]]:
    """package.json's settings, by key without the ``arena.`` prefix."""
    package = json.loads((EXTENSION / "package.json").read_text(encoding="utf-8"))
    properties: dict[str, dict[str, Any]] = package["contributes"]["configuration"]["properties"]
    assert all(key.startswith(SECTION) for key in properties), sorted(properties)
    return {key.removeprefix(SECTION): schema for key, schema in properties.items()}


def _ts_string_list(pattern: str) -> list[str]:
    """The string literals of the TypeScript list that ``pattern`` captures in settings.ts."""
    source = (EXTENSION / "src" / "core" / "settings.ts").read_text(encoding="utf-8")
    match = re.search(pattern, source, re.DOTALL)
    assert match, f"{pattern!r} not found in settings.ts"
    return re.findall(r'"([^"]+)"', match.group(1))


def forwarded_keys() -> list[str]:
    return _ts_string_list(r"export const SERVER_SETTING_KEYS = \[(.*?)\] as const;")


def null_keys() -> set[str]:
    return set(_ts_string_list(r"const NULL_IS_A_VALUE: ReadonlySet<string> = new Set\(\[(.*?)\]\)"))


def _map_settings() -> set[str]:
    """``Settings`` fields no dotted key reaches: read as a whole object (``clusters``)."""
    reached = {target.split(".")[0] for target, _check in server._FIELDS.values()}
    return {field.name for field in attrs.fields(server.Settings)} - reached


def server_keys() -> set[str]:
    """Every key the server reads from section ``arena``."""
    return set(server._FIELDS) | _map_settings()


def server_default(key: str) -> Any:
    """``Settings()``'s value of ``key``, as JSON would carry it."""
    if key in _map_settings():
        return dict(getattr(server.Settings(), key))
    value: Any = server.Settings()
    for part in server._FIELDS[key][0].split("."):
        value = getattr(value, part)
    return value


def server_accepts(key: str, value: Any) -> bool:
    _settings, problems = server.parse_settings({key: value})
    return not problems


def extension_drops(key: str, value: Any) -> bool:
    """What ``serverSettings`` in settings.ts leaves out (the server then keeps its default)."""
    if value is None:
        return key not in null_keys()
    if isinstance(value, str) and not value.strip():
        return True
    if key == "python" and isinstance(value, list) and not [part for part in value if str(part).strip()]:
        return True  # an empty argument list: "the server's own interpreter"
    return value == {}


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
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return False
        if "maximum" in schema and value > schema["maximum"]:
            return False
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return False
    return True


def test_the_extension_declares_every_server_setting_and_nothing_else() -> None:
    assert set(declared()) - CLIENT_ONLY == server_keys()


def test_the_extension_forwards_every_server_setting_once() -> None:
    keys = forwarded_keys()
    assert len(keys) == len(set(keys)), keys
    assert set(keys) == server_keys()


def test_every_server_settings_field_has_a_key() -> None:
    """A field added to a settings class but not to ``_FIELDS`` is a setting no client can set."""
    targets = {target for target, _check in server._FIELDS.values()}
    for section in server._NESTED:
        for field in attrs.fields(type(getattr(server.Settings(), section))):
            assert f"{section}.{field.name}" in targets, f"{section}.{field.name} has no key"


@pytest.mark.parametrize("key", sorted(server_keys()))
def test_the_declared_default_is_the_servers(key: str) -> None:
    default = declared()[key]["default"]
    if key == "python":
        # The server's default is its own interpreter (machine-dependent); the
        # extension declares null, which it leaves out, so the server keeps it.
        assert default is None and extension_drops(key, default)
        return
    expected = server_default(key)
    assert default == expected, (default, expected)
    assert isinstance(default, bool) == isinstance(expected, bool), (default, expected)
    assert _schema_accepts(declared()[key], default)


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
    takes_null = {key for key in server._FIELDS if server_accepts(key, None)}
    assert null_keys() == takes_null
    for key in takes_null:
        assert _schema_accepts(declared()[key], None), f"arena.{key} must declare null"
