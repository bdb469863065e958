"""The methods attrs and cattrs write for each class, compiled once per machine, not at every start.

attrs writes the ``__init__``, ``__repr__``, ``__eq__`` ... of each class it
makes as Python source when the class is defined, and compiles it; cattrs
does the same for a class's (un)structuring functions at their first use.
Python keeps the bytecode of modules in ``__pycache__``; nothing keeps
these. A server defines some 700 classes (lsprotocol's, most of them), and
compiling their methods was a third of the CPU of its start: 0.2 s of
0.6 s (docs/performance.md, "What a server's start costs"). Editors start a
server per window, and the tests start over a thousand.

``install`` gives attrs' and cattrs' code generators (the modules in
``GENERATORS``) a ``compile`` of their own, a module global that shadows the
builtin there: it looks the script up by a digest of its text and file name,
and compiles only what it has not seen. ``save`` (also at exit) writes what
was compiled anew to one file in the user's cache folder, merged with what
another process wrote meanwhile. The same text and name compiled by the same
interpreter with the same flags is the same code, so a hit changes nothing
but the time; anything wrong with the file (damaged, cut short, another
owner's, written by another Python) makes it count as empty.

A change of attrs that stops calling ``compile`` by that name only makes the
cache unused: ``tests/unit/test_codecache.py`` fails then, as
``test_pygls_privates`` does when pygls changes.
"""

from __future__ import annotations
import __future__

import atexit
import contextlib
import hashlib
import importlib
import logging
import marshal
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import CodeType, ModuleType
from typing import Any

log = logging.getLogger(__name__)

GENERATORS = ("attr._make", "cattrs.gen")
"""The modules whose ``compile`` calls are cached: attrs' class maker, cattrs' function generator."""

MAGIC = b"arena-ls code cache 1\n"
DIGEST_SIZE = 32
KEY_SIZE = 16
MAX_ENTRIES = 20_000
"""Past this many scripts (an upgrade of lsprotocol leaves the old classes' behind), a save keeps
only what this process used."""

SALTED_BY_HASH_SEED = "def __hash__("
"""attrs salts a hashable class's ``__hash__`` with ``hash()`` of a string, which changes with each
process's hash seed: the salt is a number written into the script, so its text never comes again.
Such a script is kept with a stand-in written in the salt's place (``salt_stand_in``), and its code is handed
out with the stand-in's constant swapped for this process's salt (``salted_code_for``): the very
code ``compile`` makes of the text (a server's 74 hashable lsprotocol classes: 40-50 ms of each
start compiled them anew before)."""

SALT_LINE = re.compile(r"hash\(\(\n[ \t]+(-?[0-9]+),\n")
"""Where attrs writes the salt: the line after the ``hash((`` that opens the hashed tuple."""


def salt_stand_in(salt: str) -> str:
    """The number kept in the place of ``salt`` (its text): as long, so that the code's column
    positions are the same too; one per sign and length, four or so in all."""
    digits = salt.lstrip("-")
    return salt[: len(salt) - len(digits)] + "7" * len(digits)


DISABLE_VARIABLE = "ARENA_CODE_CACHE"
"""Set to ``off`` to compile every time (the cache is never read or written)."""


def cache_file(folder: Path) -> Path:
    """The file for this interpreter: bytecode differs between Python versions and ``-O`` levels."""
    return folder / f"generated-code-{sys.implementation.cache_tag}-O{sys.flags.optimize}.bin"


class CodeCache:
    """Compiled scripts by the digest of (file name, text); what is new since the load is saved."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._known: dict[bytes, CodeType] = read_entries(path)
        self._new: dict[bytes, CodeType] = {}
        self._used: set[bytes] = set()
        self.hits = 0

    def compiler(self, future_flags: int) -> Callable[..., Any]:
        """A ``compile`` for a module whose ``from __future__`` flags are ``future_flags``: what the
        builtin called from there inherits, given explicitly since the call is made from here."""

        def cached_compile(source: Any, filename: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
            plain = not args and not kwargs and mode == "exec"
            if not plain or not isinstance(source, str) or not isinstance(filename, str):
                return compile(source, filename, mode, *args, **kwargs)
            if SALTED_BY_HASH_SEED in source:
                return self.salted_code_for(source, filename, future_flags)
            return self.code_for(source, filename, future_flags)

        return cached_compile

    def code_for(self, source: str, filename: str, future_flags: int) -> CodeType:
        key = script_key(source, filename, future_flags)
        with self._lock:
            self._used.add(key)
            cached = self._known.get(key)
            if cached is not None:
                self.hits += 1
                return cached
        code: CodeType = compile(source, filename, "exec", flags=future_flags, dont_inherit=True)
        with self._lock:
            self._known[key] = code
            self._new[key] = code
        return code

    def salted_code_for(self, source: str, filename: str, future_flags: int) -> CodeType:
        """The code of a script with one salt (``SALTED_BY_HASH_SEED``): kept with the stand-in,
        handed out with this salt. Anything else (no salt found, two, the stand-in's number
        already in the text) is compiled each time, never kept."""
        salts = list(SALT_LINE.finditer(source))
        stand_in = salt_stand_in(salts[0][1]) if len(salts) == 1 else ""
        if not stand_in or stand_in in source:
            code: CodeType = compile(source, filename, "exec", flags=future_flags, dont_inherit=True)
            return code
        salt = salts[0]
        general = source[: salt.start(1)] + stand_in + source[salt.end(1) :]
        return swap_constant(self.code_for(general, filename, future_flags), int(stand_in), int(salt[1]))

    def save(self) -> bool:
        """Write what was compiled anew, merged with the file as it is now; True if written. A
        failure (a full disk, a folder that cannot be made) costs the next start its compiles only."""
        with self._lock:
            if not self._new:
                return False
            new = dict(self._new)
            used = set(self._used)
        merged = read_entries(self.path)
        merged.update(new)
        if len(merged) > MAX_ENTRIES:
            merged = {key: code for key, code in merged.items() if key in used or key in new}
        try:
            write_entries(self.path, merged)
        except OSError as error:
            log.debug("the generated code's cache %s was not written: %s", self.path, error)
            return False
        with self._lock:
            for key in new:
                self._new.pop(key, None)
        return True


def swap_constant(code: CodeType, old: int, new: int) -> CodeType:
    """``code`` with the integer constant ``old`` replaced by ``new`` wherever it is: in the
    functions' code it holds, and in the tuples the compiler folded (``hash((salt,))`` of a class
    with no hashed field is one constant)."""
    return code.replace(co_consts=tuple(_swapped(constant, old, new) for constant in code.co_consts))


def _swapped(constant: object, old: int, new: int) -> object:
    if type(constant) is int and constant == old:
        return new
    if isinstance(constant, CodeType):
        return swap_constant(constant, old, new)
    if type(constant) is tuple:
        return tuple(_swapped(item, old, new) for item in constant)
    return constant


def script_key(source: str, filename: str, future_flags: int) -> bytes:
    digest = hashlib.blake2b(digest_size=KEY_SIZE)
    digest.update(f"{future_flags}\0{filename}\0".encode("utf-8", "surrogatepass"))
    digest.update(source.encode("utf-8", "surrogatepass"))
    return digest.digest()


def read_entries(path: Path) -> dict[bytes, CodeType]:
    """The file's scripts; empty for a missing, damaged or foreign file (never an error)."""
    try:
        if not _trusted(path):
            return {}
        from arena_ls.platform.files import read_bytes_shared

        data = read_bytes_shared(path)
    except OSError:
        return {}
    return decode(data)


def decode(data: bytes) -> dict[bytes, CodeType]:
    """The entries of a cache file's bytes, checked against their digest before ``marshal`` reads
    them (``marshal`` is not safe against damaged data); empty when anything is off."""
    header = len(MAGIC) + DIGEST_SIZE
    if len(data) < header or not data.startswith(MAGIC):
        return {}
    payload = data[header:]
    if hashlib.blake2b(payload, digest_size=DIGEST_SIZE).digest() != data[len(MAGIC) : header]:
        return {}
    try:
        entries = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return {}
    if not isinstance(entries, dict):
        return {}
    return {
        key: code for key, code in entries.items() if isinstance(key, bytes) and isinstance(code, CodeType)
    }


def encode(entries: dict[bytes, CodeType]) -> bytes:
    payload = marshal.dumps(entries)
    return MAGIC + hashlib.blake2b(payload, digest_size=DIGEST_SIZE).digest() + payload


def write_entries(path: Path, entries: dict[bytes, CodeType]) -> None:
    """Write the file whole beside it, then rename it over: a reader sees the old file or the new."""
    from arena_ls.platform.files import replace_file

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".generated-code-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(encode(entries))
        replace_file(temporary, path)
    except BaseException:
        _remove_quietly(temporary)
        raise


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


def _trusted(path: Path) -> bool:
    """POSIX: a cache file is read only if it is ours and no one else may write it (its code is
    run); Windows: the per-user folder's permissions already say so."""
    if sys.platform == "win32":
        return path.is_file()
    status = path.stat()
    return status.st_uid == os.geteuid() and not status.st_mode & 0o022


def future_flags_of(module: ModuleType) -> int:
    """The compiler flags of the ``from __future__`` imports at the top of ``module``."""
    flags = 0
    for value in list(vars(module).values()):
        if isinstance(value, __future__._Feature):
            flags |= value.compiler_flag
    return flags


_installed: CodeCache | None = None
_installing = threading.Lock()


def install(folder: Path | None = None, generators: Iterable[str] = GENERATORS) -> CodeCache | None:
    """Cache the generators' compiles in ``folder`` (the user's cache folder by default), saved at
    exit; None where ``ARENA_CODE_CACHE=off`` or a generator is missing. Once per process."""
    with _installing:  # a spare agent's loading thread and its main thread may both call it
        return _install_once(folder, generators)


def _install_once(folder: Path | None, generators: Iterable[str]) -> CodeCache | None:
    global _installed
    if _installed is not None:
        return _installed
    if os.environ.get(DISABLE_VARIABLE, "").lower() == "off":
        return None
    try:
        modules = [importlib.import_module(name) for name in generators]
    except ImportError:
        return None
    if folder is None:
        from arena_ls.platform.files import cache_home

        try:
            folder = cache_home() / "arena-ls"
        except (RuntimeError, KeyError, OSError):  # no home folder (a service account, HOME unset)
            return None
    cache = CodeCache(cache_file(folder))
    for module in modules:
        module.compile = cache.compiler(future_flags_of(module))  # type: ignore[attr-defined]
    atexit.register(cache.save)
    _installed = cache
    return cache
