"""How a setting is declared once, for the server and for every editor.

Each setting is one attrs field of a class in ``settings.py`` or ``setting_sections.py``, made with
:func:`setting`: its dotted key (``preflight.minFreeRamMb``), its default,
its :class:`Kind` (the server's :class:`~arena_ls.validation.Check` and the
JSON-schema words an editor's settings UI checks, side by side) and the
description a person reads in that UI. From those fields the server derives
the table it parses with (``settings._FIELDS``), and
``python -m arena_ls.settings_schema --write`` generates what the editors
read: VS Code's ``package.json`` properties, ``src/core/settingsTable.ts`` and
the Neovim plugin's ``arena/server_defaults.lua``.

Settings that only an editor reads (the interpreter that runs the server,
tracing) are :class:`Declared` values without a check, listed in
``settings.EDITOR_SETTINGS``. This module imports nothing above
``validation``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import attrs

from arena_ls.validation import Check

T = TypeVar("T")

SETTING = "arena.setting"
"""The attrs metadata key of a field's :class:`Declared`."""
SECTION = "arena.section"
"""The attrs metadata key of a field that holds a settings class of its own (``settings.preflight``)."""


class _FieldDefault:
    """The editors declare the field's own default (as JSON)."""

    def __repr__(self) -> str:
        return "FIELD_DEFAULT"


FIELD_DEFAULT: Any = _FieldDefault()


@attrs.frozen
class Kind(Generic[T]):
    """What values a setting takes: the server's check and the schema words that say the same.

    ``tests/editor/test_settings_schema.py`` offers both the same values and fails
    when they disagree, so the two halves cannot drift apart.
    """

    check: Check[T]
    schema: Mapping[str, Any]

    def or_none(self) -> Kind[T | None]:
        """The same kind that also takes null (the "decide for me" of a setting)."""
        types = self.schema["type"]
        listed = list(types) if isinstance(types, (list, tuple)) else [types]
        return Kind(self.check.or_none(), {**self.schema, "type": [*listed, "null"]})


def kind(check: Check[T], **schema: Any) -> Kind[T]:
    """``kind(integer(minimum=0), type="integer", minimum=0)``."""
    assert schema.get("type") is not None, "a kind needs its JSON type"
    return Kind(check, schema)


@attrs.frozen
class Declared:
    """One setting as every client declares it.

    ``check`` is None for a setting the server does not parse from the flat
    table: one only an editor reads, or ``clusters`` (parsed on its own).
    ``editor_default`` is what the editors declare when it is not the field's
    default as JSON: null for ``python`` (the server picks its own
    interpreter, which depends on the machine), ``{}`` for ``clusters``.
    """

    key: str
    description: str
    schema: Mapping[str, Any]
    check: Check[Any] | None = None
    markdown: bool = False
    """True: ``description`` is Markdown (VS Code's ``markdownDescription``)."""
    scope: str = "resource"
    editor_default: Any = FIELD_DEFAULT


def setting(
    key: str,
    default: Any,
    setting_kind: Kind[Any],
    description: str,
    *,
    markdown: bool = False,
    factory: Callable[[], Any] | None = None,
    editor_default: Any = FIELD_DEFAULT,
    parsed: bool = True,
) -> Any:
    """An attrs field that is a setting (``parsed=False``: parsed apart, like ``clusters``)."""
    declared = Declared(
        key=key,
        description=description,
        schema=setting_kind.schema,
        check=setting_kind.check if parsed else None,
        markdown=markdown,
        editor_default=editor_default,
    )
    metadata = {SETTING: declared}
    if factory is not None:
        return attrs.field(factory=factory, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def section(cls: Callable[[], T]) -> Any:
    """An attrs field holding a settings class of its own, such as ``PreflightSettings``."""
    return attrs.field(factory=cls, metadata={SECTION: True})


@attrs.frozen
class Found:
    """A declared setting, where it lives in the settings object and its default there."""

    declared: Declared
    target: str
    """The attribute path: ``preflight.min_free_ram_mb``."""
    default: Any


def declared_settings(root: Any) -> Iterator[Found]:
    """Every setting declared on ``root`` (a settings object) and its sections, in field order."""
    yield from _walk(root, "")


def _walk(obj: Any, prefix: str) -> Iterator[Found]:
    for field in attrs.fields(type(obj)):
        value = getattr(obj, field.name)
        if field.metadata.get(SECTION):
            yield from _walk(value, f"{prefix}{field.name}.")
        elif SETTING in field.metadata:
            yield Found(field.metadata[SETTING], prefix + field.name, value)


def undeclared_fields(root: Any) -> list[str]:
    """Fields of ``root`` and its sections that are neither a setting nor a section.

    Such a field would be a setting nobody can set.
    """
    missing = []
    for field in attrs.fields(type(root)):
        if field.metadata.get(SECTION):
            missing += [f"{field.name}.{name}" for name in undeclared_fields(getattr(root, field.name))]
        elif SETTING not in field.metadata:
            missing.append(field.name)
    return missing
