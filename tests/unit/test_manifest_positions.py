"""``arena_ls.manifest.positions`` gives ``json_source_map.calculate``'s answer for any JSON text.

The loader's positions come from the faster scanner since issue 38 item 7; every AR1xx finding's
place depends on them, so the two are held to the same dictionary (pointers, their order of
insertion, every line, column and position of every value and key) for any valid JSON: generated
values written with any indentation, separators and line breaks (CRLF too), escapes and
non-ASCII text in keys and strings, duplicate keys, and the manifests of the repository.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import json_source_map
from hypothesis import given, settings
from hypothesis import strategies as st

from arena_ls.manifest.positions import calculate
from tests.helpers.fuzzing import examples

REPO = Path(__file__).resolve().parents[2]

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)
LAYOUTS = st.sampled_from(
    [
        {"indent": None, "separators": (",", ":")},
        {"indent": None, "separators": (", ", ": ")},
        {"indent": 2},
        {"indent": "\t"},
        {"indent": " \r\n  "},
        {"indent": 4, "separators": (" ,", " : ")},
    ]
)


def same(text: str) -> None:
    ours = calculate(text)
    theirs = json_source_map.calculate(text)
    assert list(ours) == list(theirs)
    assert ours == theirs


@settings(max_examples=examples(300), deadline=None)
@given(VALUES, LAYOUTS, st.booleans(), st.booleans())
def test_the_same_answer_for_any_json_value_in_any_layout(
    value: Any, layout: dict[str, Any], ascii_only: bool, crlf: bool
) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, **layout)
    if crlf:
        text = text.replace("\n", "\r\n")
    same(f"\n  {text}\n")


def test_the_same_answer_with_escaped_and_duplicate_keys_and_a_bare_value() -> None:
    same('{"a/b": 1, "t~1": [true, {"\\"q\\"": "x\\\\"}], "a/b": {"é": null}, "\\u00e9": -1.5e3}')
    same("  42  ")
    same('"just a string"')
    same('[[], {}, [[]], {"": {"": []}}]')


def test_the_same_answer_for_every_manifest_of_the_repository() -> None:
    manifests = [
        path
        for path in REPO.rglob("manifest*.json")
        if ".venv" not in path.parts and "node_modules" not in path.parts
    ]
    assert manifests, "the repository has manifests"
    for path in manifests:
        text = path.read_text(encoding="utf-8")
        try:
            json.loads(text)
        except ValueError:
            continue  # a broken manifest of a test: the loader never asks for its positions
        same(text)
