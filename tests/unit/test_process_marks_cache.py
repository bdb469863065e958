"""The process marker's kept verdicts (tests/helpers/process_marks_cache.py): reused only for
byte-identical source, dropped for a test file that changed, and all dropped for a change to
anything a test can reach through (helpers, ``arena_ls/``)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.process_marks_cache import MarkCache, is_missing


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "tests" / "helpers").mkdir(parents=True)
    (repo / "arena_ls").mkdir()
    (repo / "arena_ls" / "core.py").write_text("def run():\n    pass\n")
    (repo / "tests" / "helpers" / "spawn.py").write_text("import subprocess\n")
    (repo / "tests" / "test_a.py").write_text("def test_one():\n    pass\n")
    (repo / "tests" / "test_b.py").write_text("from tests.test_a import test_one\n")
    return repo


def _kept(repo: Path, tmp_path: Path) -> MarkCache:
    return MarkCache(repo, tmp_path / "cache" / "marks.json")


def _fill(repo: Path, tmp_path: Path) -> None:
    cache = _kept(repo, tmp_path)
    cache.put(repo / "tests" / "test_a.py", "tests/test_a.py::test_one", None)
    cache.put(repo / "tests" / "test_b.py", "tests/test_b.py::test_two", "fixture x: spawn")
    cache.save()


def test_verdicts_are_kept_between_runs(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _fill(repo, tmp_path)
    again = _kept(repo, tmp_path)
    assert again.get(repo / "tests" / "test_a.py", "tests/test_a.py::test_one") is None
    assert again.get(repo / "tests" / "test_b.py", "tests/test_b.py::test_two") == "fixture x: spawn"
    assert is_missing(again.get(repo / "tests" / "test_a.py", "tests/test_a.py::test_new"))


def test_a_changed_test_file_is_read_again_alone(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _fill(repo, tmp_path)
    (repo / "tests" / "test_b.py").write_text("from tests.test_a import test_one\nimport os\n")
    again = _kept(repo, tmp_path)
    assert is_missing(again.get(repo / "tests" / "test_b.py", "tests/test_b.py::test_two"))
    assert again.get(repo / "tests" / "test_a.py", "tests/test_a.py::test_one") is None


def test_a_change_to_an_imported_test_file_drops_its_importers_verdicts(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _fill(repo, tmp_path)
    (repo / "tests" / "test_a.py").write_text(
        "import subprocess\ndef test_one():\n    subprocess.run(['x'])\n"
    )
    again = _kept(repo, tmp_path)
    assert is_missing(again.get(repo / "tests" / "test_b.py", "tests/test_b.py::test_two"))


def test_a_change_to_shared_code_drops_every_verdict(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    for shared in (repo / "arena_ls" / "core.py", repo / "tests" / "helpers" / "spawn.py"):
        _fill(repo, tmp_path)
        shared.write_text(shared.read_text() + "# changed\n")
        again = _kept(repo, tmp_path)
        assert is_missing(again.get(repo / "tests" / "test_a.py", "tests/test_a.py::test_one")), shared


def test_a_new_shared_module_drops_every_verdict(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _fill(repo, tmp_path)
    (repo / "tests" / "conftest.py").write_text("import subprocess\n")
    assert is_missing(_kept(repo, tmp_path).get(repo / "tests" / "test_a.py", "tests/test_a.py::test_one"))


def test_a_damaged_cache_file_reads_everything_afresh(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    _fill(repo, tmp_path)
    for damage in (b"{not json", b"[]", b'{"version": 1, "shared": 5}', b"\xff\xfe"):
        (tmp_path / "cache" / "marks.json").write_bytes(damage)
        again = _kept(repo, tmp_path)
        assert is_missing(again.get(repo / "tests" / "test_a.py", "tests/test_a.py::test_one")), damage


def test_a_test_outside_the_clone_is_never_kept(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    outside = tmp_path / "elsewhere" / "test_x.py"
    outside.parent.mkdir()
    outside.write_text("def test_x():\n    pass\n")
    cache = _kept(repo, tmp_path)
    cache.put(outside, "test_x.py::test_x", None)
    assert not cache.changed
    assert is_missing(cache.get(outside, "test_x.py::test_x"))


def test_an_unwritable_cache_folder_is_no_failure(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    cache = MarkCache(repo, blocker / "marks.json")
    cache.put(repo / "tests" / "test_a.py", "tests/test_a.py::test_one", None)
    cache.save()  # nothing raised; the next run reads the source again
    assert is_missing(MarkCache(repo, blocker / "marks.json").get(repo / "tests" / "test_a.py", "t"))
