"""The generated methods' cache (``arena_ls/codecache.py``): a hit is the same code, and nothing
about the file (damaged, cut short, another user's, a full disk, two writers) costs more than
the compiles it would have saved."""

from __future__ import annotations

import builtins
import hashlib
import marshal
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import attr._make
import attrs
import cattrs
import cattrs.gen
import pytest

from arena_ls import codecache, platform
from arena_ls.codecache import MAGIC, CodeCache, cache_file, decode, encode, read_entries
from tests.lifecycle.test_full_disk import fill, small_filesystem


def _point_class() -> type:
    """A new attrs class, the same each call (as a module defines it at each start)."""
    return attrs.make_class("Point", {"x": attrs.field(), "y": attrs.field(default=0)})


def _frozen_class() -> type:
    return attrs.make_class("FrozenPoint", {"x": attrs.field()}, frozen=True)


def _through(cache: CodeCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make attrs' and cattrs' compiles go through ``cache`` for this test only."""
    for module in (attr._make, cattrs.gen):
        monkeypatch.setattr(
            module, "compile", cache.compiler(codecache.future_flags_of(module)), raising=False
        )


def _entries(tmp_path: Path) -> dict[bytes, Any]:
    return read_entries(cache_file(tmp_path))


def test_a_class_made_again_takes_its_methods_from_the_cache_and_behaves_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = CodeCache(cache_file(tmp_path))
    _through(first, monkeypatch)
    _point_class()
    assert first.hits == 0
    assert first.save()

    again = CodeCache(cache_file(tmp_path))
    _through(again, monkeypatch)
    point = _point_class()
    assert again.hits >= 1, "attrs no longer compiles through the name `compile`: the cache is unused"
    assert not again.save(), "nothing new was compiled, so nothing is written"
    assert point(1) == point(1, 0) != point(2)
    assert repr(point(3, 4)) == "Point(x=3, y=4)"
    monkeypatch.undo()
    plain = _point_class()
    assert repr(plain(3, 4)) == repr(point(3, 4))


def test_cattrs_functions_are_cached_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = CodeCache(cache_file(tmp_path))
    _through(first, monkeypatch)
    point = _point_class()
    converter = cattrs.Converter()
    assert converter.structure({"x": 1, "y": 2}, point) == point(1, 2)
    assert converter.unstructure(point(1, 2)) == {"x": 1, "y": 2}
    assert first.save()
    again = CodeCache(cache_file(tmp_path))
    _through(again, monkeypatch)
    point = _point_class()
    converter = cattrs.Converter()
    hits_before = again.hits
    assert converter.structure({"x": 5}, point) == point(5, 0)
    assert converter.unstructure(point(5, 6)) == {"x": 5, "y": 6}
    assert again.hits >= hits_before + 2


def _constants(code: Any) -> set[object]:
    """Every constant of ``code`` and of the functions' code it holds."""
    found: set[object] = set()
    for constant in code.co_consts:
        found |= _constants(constant) if hasattr(constant, "co_consts") else {constant}
    return found


SALTED_SCRIPT = """def __hash__(self):
        return hash((
                {salt},
                self.x,
            ))
def __eq__(self, other):
    return (self.x,) == (other.x,)"""
"""A script as attrs writes a hashable class's methods: its salt is ``hash()`` of a string."""


@pytest.mark.parametrize(
    ("first_salt", "salt"),
    [
        (123_456_789, 987_654_321),
        (123_456_789, 100_000_000),
        (-6_511_823_349_287_412_817, -1_234_567_890_123_456_789),
    ],
)
def test_a_salted_script_is_kept_with_a_stand_in_and_handed_out_with_each_processs_salt(
    tmp_path: Path, first_salt: int, salt: int
) -> None:
    """Another process (another hash seed) writes another salt into the same script: it gets the
    kept code with its own salt, the very code ``compile`` makes of its text."""
    first = CodeCache(cache_file(tmp_path))
    text = SALTED_SCRIPT.format(salt=first_salt)
    compiled = first.compiler(0)(text, "<attrs generated methods P>", "exec")
    assert compiled == compile(text, "<attrs generated methods P>", "exec", dont_inherit=True)
    assert first.save()
    (kept,) = _entries(tmp_path).values()
    assert int(codecache.salt_stand_in(str(first_salt))) in _constants(kept)
    assert first_salt not in _constants(kept)

    again = CodeCache(cache_file(tmp_path))
    text = SALTED_SCRIPT.format(salt=salt)
    code = again.compiler(0)(text, "<attrs generated methods P>", "exec")
    assert again.hits == 1
    assert code == compile(text, "<attrs generated methods P>", "exec", dont_inherit=True)
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    point = type("P", (), {"x": 7})()
    assert namespace["__hash__"](point) == hash((salt, 7))


def test_a_salt_of_another_length_is_compiled_and_kept_beside(tmp_path: Path) -> None:
    """The stand-in is as long as the salt (the code's column positions): a salt of another
    length or sign is another script, compiled once and kept too."""
    cache = CodeCache(cache_file(tmp_path))
    for salt in (123_456_789, 42, -42, 55):
        text = SALTED_SCRIPT.format(salt=salt)
        assert cache.compiler(0)(text, "<P>", "exec") == compile(text, "<P>", "exec", dont_inherit=True)
    assert cache.hits == 1 and cache.save()
    assert len(_entries(tmp_path)) == 3


@pytest.mark.parametrize(
    "text",
    [
        SALTED_SCRIPT.format(salt=12) + "\ndef g():\n    return 77",
        SALTED_SCRIPT.format(salt=5) + "\ndef g(self):\n    return hash((\n        9,\n    ))",
        "def __hash__(self):\n    return hash(self.x)",
    ],
    ids=["the stand-in already there", "two salts", "no salt where attrs writes it"],
)
def test_a_salted_script_the_cache_cannot_read_is_compiled_each_time_and_never_kept(
    tmp_path: Path, text: str
) -> None:
    cache = CodeCache(cache_file(tmp_path))
    assert cache.compiler(0)(text, "<script>", "exec") == compile(text, "<script>", "exec", dont_inherit=True)
    assert not cache.save(), "a script the cache cannot make general must not grow the file"
    assert not cache_file(tmp_path).exists()


HASHES_SCRIPT = """
import sys
from pathlib import Path
import attrs
from arena_ls import codecache
cache = codecache.install(Path(sys.argv[1]))
frozen = attrs.make_class("FrozenPoint", {"x": attrs.field(), "y": attrs.field(default=0)}, frozen=True)
empty = attrs.make_class("Empty", {}, frozen=True)
cached = attrs.make_class("Cached", {"x": attrs.field()}, frozen=True, cache_hash=True)
print(hash(frozen(1, 2)), hash(empty()), hash(cached(3)), hash(cached(3)), cache.hits if cache else -1)
"""


def test_hashable_classes_hash_alike_from_the_cache_and_compiled_under_another_hash_seed(
    tmp_path: Path,
) -> None:
    """The real attrs, in processes of their own: the first (hash seed 1) compiles and keeps the
    scripts; the second (seed 2) takes them from the cache and hashes as a process of seed 2
    that compiles them (``ARENA_CODE_CACHE=off``)."""

    def hashes(seed: int, cache: str = "") -> list[int]:
        env = {**os.environ, "PYTHONHASHSEED": str(seed), codecache.DISABLE_VARIABLE: cache}
        printed = subprocess.run(
            [sys.executable, "-c", HASHES_SCRIPT, str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        return [int(word) for word in printed.split()]

    first = hashes(1)
    assert first[-1] == 0 and cache_file(tmp_path).exists()
    hashes(2)  # a salt of another sign or length than seed 1's is kept now (the stand-in's length)
    from_cache = hashes(2)
    assert from_cache[-1] >= 3, "the hashable classes' scripts were compiled again"
    compiled = hashes(2, cache="off")
    assert from_cache[:-1] == compiled[:-1]
    assert first[:3] != compiled[:3], "the seed changes the salts (else this test proves nothing)"


def test_the_code_is_compiled_with_the_generators_future_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``compile`` inherits its caller's ``from __future__`` imports; called from the cache, the
    caller's (attrs') are given explicitly: annotations stay strings, as attrs' own compile makes them."""
    script = "def f(x: Undefined) -> None: pass\n"
    for attempt in ("compiled", "from the cache"):
        cache = CodeCache(cache_file(tmp_path))
        namespace: dict[str, Any] = {}
        exec(cache.compiler(codecache.future_flags_of(attr._make))(script, "<script>", "exec"), namespace)
        assert namespace["f"].__annotations__ == {"x": "Undefined", "return": "None"}, attempt
        assert cache.hits == (attempt == "from the cache")
        cache.save()


def test_a_call_the_cache_does_not_know_goes_to_the_builtin(tmp_path: Path) -> None:
    cache = CodeCache(cache_file(tmp_path))
    compile_ = cache.compiler(0)
    assert eval(compile_("1 + 2", "<expr>", "eval")) == 3
    assert compile_("x = 1", "<s>", "exec", dont_inherit=True).co_filename == "<s>"
    assert not cache.save()


def _valid_file_bytes() -> bytes:
    return encode({b"k" * 16: builtins.compile("x = 1", "<s>", "exec")})


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _foreign_payload() -> bytes:
    payload = marshal.dumps(["not", "a", "dict"])
    return MAGIC + hashlib.blake2b(payload, digest_size=codecache.DIGEST_SIZE).digest() + payload


@pytest.mark.parametrize(
    "damaged",
    [
        pytest.param(b"", id="empty"),
        pytest.param(MAGIC, id="header-only"),
        pytest.param(_valid_file_bytes()[:-7], id="cut-short"),
        pytest.param(_flip_last_byte(_valid_file_bytes()), id="one-byte-wrong"),
        pytest.param(b"X" + _valid_file_bytes()[1:], id="wrong-magic"),
        pytest.param(_foreign_payload(), id="not-a-dict"),
        pytest.param(os.urandom(4096), id="noise"),
    ],
)
def test_a_damaged_file_counts_as_empty_and_is_written_anew(
    damaged: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = cache_file(tmp_path)
    path.write_bytes(damaged)
    path.chmod(0o600)
    assert decode(damaged) == {}
    cache = CodeCache(path)
    _through(cache, monkeypatch)
    point = _point_class()
    assert point(1).x == 1
    assert cache.save()
    assert _entries(tmp_path), "the next start reads what this one wrote"


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX owners and modes")
def test_a_file_others_may_write_is_never_read(tmp_path: Path) -> None:
    path = cache_file(tmp_path)
    path.write_bytes(_valid_file_bytes())
    path.chmod(0o600)
    assert read_entries(path)
    path.chmod(0o666)
    assert read_entries(path) == {}, "code another user could have written is not run"
    path.chmod(0o620)
    assert read_entries(path) == {}


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() != 0, reason="needs root to give the file away")
def test_another_users_file_is_never_read(tmp_path: Path) -> None:
    path = cache_file(tmp_path)
    path.write_bytes(_valid_file_bytes())
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    assert read_entries(path) == {}


def test_two_processes_saving_at_once_keep_both_scripts(tmp_path: Path) -> None:
    path = cache_file(tmp_path)
    first, second = CodeCache(path), CodeCache(path)  # both loaded before either saved
    first.compiler(0)("a = 1", "<first>", "exec")
    second.compiler(0)("b = 2", "<second>", "exec")
    assert first.save()
    assert second.save()
    both = CodeCache(path)
    both.compiler(0)("a = 1", "<first>", "exec")
    both.compiler(0)("b = 2", "<second>", "exec")
    assert both.hits == 2


def test_past_its_bound_a_save_keeps_only_what_this_process_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codecache, "MAX_ENTRIES", 3)
    path = cache_file(tmp_path)
    old = CodeCache(path)
    for number in range(3):
        old.compiler(0)(f"v = {number}", "<old>", "exec")
    assert old.save()
    now = CodeCache(path)
    now.compiler(0)("v = 0", "<old>", "exec")
    now.compiler(0)("w = 1", "<new>", "exec")
    assert now.save()
    assert len(read_entries(path)) == 2


def test_a_full_disk_costs_the_next_start_its_compiles_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with small_filesystem(tmp_path / "small", "64k") as small:
        cache = CodeCache(cache_file(small / "arena-ls"))
        _through(cache, monkeypatch)
        (small / "arena-ls").mkdir(mode=0o700)
        fill(small)
        point = _point_class()
        assert point(2).x == 2
        assert not cache.save()
        assert sorted(path.name for path in (small / "arena-ls").iterdir()) == [], "no half-written file left"


def test_a_folder_that_cannot_be_made_costs_the_compiles_only(tmp_path: Path) -> None:
    (tmp_path / "blocked").write_text("a file where the folder would go")
    cache = CodeCache(cache_file(tmp_path / "blocked" / "arena-ls"))
    cache.compiler(0)("x = 1", "<s>", "exec")
    assert not cache.save()


def test_install_caches_the_generators_and_saves_at_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(codecache, "_installed", None)
    monkeypatch.setattr(attr._make, "compile", builtins.compile, raising=False)  # undone after the test
    at_exit: list[Any] = []
    monkeypatch.setattr(codecache.atexit, "register", at_exit.append)
    monkeypatch.delenv(codecache.DISABLE_VARIABLE, raising=False)
    cache = codecache.install(tmp_path, generators=("attr._make",))
    assert cache is not None
    assert codecache.install(tmp_path) is cache, "once per process"
    _point_class()
    assert at_exit == [cache.save]
    assert at_exit[0]()
    assert _entries(tmp_path)


def test_off_leaves_the_generators_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codecache, "_installed", None)
    monkeypatch.setenv(codecache.DISABLE_VARIABLE, "off")
    assert codecache.install(tmp_path) is None
    assert "compile" not in vars(attr._make)
    assert not cache_file(tmp_path).exists()


@pytest.mark.parametrize(
    ("system", "environ", "expected"),
    [
        ("linux", {"XDG_CACHE_HOME": "/x/cache"}, Path("/x/cache")),
        ("linux", {"XDG_CACHE_HOME": "relative"}, Path.home() / ".cache"),
        ("linux", {}, Path.home() / ".cache"),
        ("darwin", {"XDG_CACHE_HOME": "/x/cache"}, Path.home() / "Library" / "Caches"),
        ("win32", {"LOCALAPPDATA": "/x/local"}, Path("/x/local")),
        ("win32", {}, Path.home() / "AppData" / "Local"),
    ],
)
def test_the_users_cache_folder_on_each_system(
    system: str, environ: dict[str, str], expected: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", system)
    assert platform.cache_home(environ) == expected


def test_threads_installing_at_once_share_one_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spare agent installs on its loading thread while its main thread, handed a run, installs
    too: one cache, and neither fails (each once changed attrs' module while the other read it)."""
    cache_file(tmp_path).parent.mkdir(exist_ok=True)
    cache_file(tmp_path).write_bytes(_valid_file_bytes())  # a load to be in the middle of
    cache_file(tmp_path).chmod(0o600)
    monkeypatch.setattr(codecache, "_installed", None)
    monkeypatch.setattr(attr._make, "compile", builtins.compile, raising=False)
    monkeypatch.setattr(cattrs.gen, "compile", builtins.compile, raising=False)
    monkeypatch.setattr(codecache.atexit, "register", lambda save: None)
    monkeypatch.delenv(codecache.DISABLE_VARIABLE, raising=False)
    start = threading.Barrier(8)
    caches: list[CodeCache | None] = []

    def install() -> None:
        start.wait()
        caches.append(codecache.install(tmp_path))

    threads = [threading.Thread(target=install) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(caches) == 8 and caches[0] is not None
    assert all(cache is caches[0] for cache in caches)


def test_a_user_without_a_home_folder_starts_without_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Path.home()`` raises where neither HOME nor the password database names one (a service
    account): the server starts, compiling as before."""

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(codecache, "_installed", None)
    monkeypatch.delenv(codecache.DISABLE_VARIABLE, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert codecache.install() is None
    assert "compile" not in vars(attr._make)
