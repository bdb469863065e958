"""scripts/house_counts.py, the counts of issue 38: its cycle finder and its file counts."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.by_path import load_module

pytestmark = pytest.mark.xdist_group("sources")  # the script walks the package through helpers/sources.py

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "house_counts.py"


@pytest.fixture(scope="module")
def counts() -> ModuleType:
    return load_module("house_counts", SCRIPT)


def test_a_cycle_of_packages_is_found_and_a_tree_is_not(counts: ModuleType) -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert counts.strongly_connected(graph) == [["a", "b", "c"]]
    assert counts.strongly_connected({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_a_module_and_its_package_are_one_part(counts: ModuleType) -> None:
    root = counts.REPO / "arena_ls"
    assert counts.package_of(root / "lifecycle" / "backends" / "base.py") == "arena_ls.lifecycle"
    assert counts.package_of(root / "platform.py") == "arena_ls.platform"
    assert counts.package_of(root / "__init__.py") == "arena_ls"


def test_the_counts_print_and_check(counts: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert counts.main([]) == 0
    said = capsys.readouterr().out
    for line in ("package cycles:", "arrows up or sideways", "largest top-level parts", "over 600 lines"):
        assert line in said
    long_ones = counts.long_files(counts.python_modules())
    assert all(lines > counts.LONGEST_MODULE for _, lines in long_ones)


def test_generated_client_files_are_not_counted_their_sources_are(counts: ModuleType) -> None:
    files = {str(path.relative_to(counts.REPO)) for path in counts.client_files()}
    assert "editor-client/aide/lib/core.mjs" not in files, "the bundle of the VS Code core: a build"
    assert "editor-client/nvim/lua/arena/wording.lua" not in files
    assert "editor-client/vscode/src/core/workLost.ts" in files
    assert "editor-client/aide/training-arena.mjs" in files
