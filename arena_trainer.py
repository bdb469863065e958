"""arena-ls's trainer kit: the shortest correct way for a trainer to keep its side of the contract.

One file, the standard library only, Python 3.8 or later. It imports no
framework until one is used: ``save`` imports torch when it saves,
``HFCallback`` imports transformers when it is first named, and
``LightningCallback`` Lightning. Copy it beside your script (the quick fix
"Add the trainer kit beside this script" does), or ``pip install arena-ls``:
a copy beside the script is found whatever the interpreter's flags (``-E``,
``-I``), since the script's folder is always ``sys.path[0]``.

A plain PyTorch loop::

    import arena_trainer as arena

    start = arena.resume_step() or 0           # --start-step N on a relaunch
    for step in range(start + 1, total + 1):
        loss = arena.oom_retry(lambda: train_step(batch_for(step)))
        arena.empty_cache(step)                # every 50 steps
        arena.progress(step, total, loss=loss)
        stop = arena.should_stop()             # the stop file, SIGTERM, SIGINT, CTRL_BREAK
        if step % 100 == 0 or stop or step == total:
            arena.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step},
                       "checkpoints/latest.pt", step)
        if stop:
            break

A loop that never saved needs no guard of its own: ``arena.save(state, path, step,
every=200)`` saves only every 200 steps (and on every call once a stop is asked), and
``if arena.due(step, every=200):`` guards a save the kit does not make (both are
arena-ls additions to contract 8.1's kit).

Hugging Face: ``Trainer(..., callbacks=[arena_trainer.HFCallback()])``.
Lightning: ``Trainer(..., callbacks=[arena_trainer.LightningCallback()])``, and
``trainer.fit(..., ckpt_path=arena_trainer.resume_path())`` where no option of the
script's own gives ``fit`` the checkpoint (``resume.args`` ``["--resume-path", "{path}"]``).
docs/trainer-guide.md walks through each, and Accelerate's loop.

What the kit prints: one ``@arena {json}`` line per announcement on stdout
(contract section 3), in ASCII only (``\\uXXXX`` escapes), so a console in
any code page prints it; a write that fails (a closed or broken stdout) is
dropped, never raised: nothing the kit prints can fail the run.

``bytes`` and ``sha256`` of a checkpoint: for a file, its size and the
SHA-256 of its content. For a folder (Hugging Face's ``checkpoint-N``,
Accelerate's ``save_state`` folder), ``bytes`` is the sum of the sizes of
the regular files under it and ``sha256`` is the SHA-256 of its manifest:
one line per file, sorted by the file's path relative to the folder
(``/``-separated), each ``<sha256 of the file>  <size>  <relative path>\\n``,
encoded as UTF-8 (undecodable names as their bytes). Symbolic links to
folders are not followed. ``digest(path)`` computes both, so a checker can
recompute them the same way.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

T = TypeVar("T")

PROTOCOL = 1
"""The version of the ``@arena`` lines this kit speaks (carried by every line as ``protocol``)."""

PREFIX = "@arena "
STOP_FILE_VARIABLE = "ARENA_STOP_FILE"
RESUME_STEP_VARIABLE = "ARENA_RESUME_STEP"
"""Set by a supervisor that tells the resume step in the environment too; the command line otherwise."""
RESUME_STEP_OPTIONS = ("--start-step", "--start_step", "--resume-step", "--resume_step")
RESUME_PATH_OPTIONS = ("--resume-path", "--resume_path")
"""What ``resume_path()`` reads: ``resume.args`` ``["--resume-path", "{path}"]``."""
RESUME_ARGS_VARIABLE = "ARENA_RESUME_ARGS"
"""Set by arena-ls on a launch that resumes: the JSON list of the ``resume.args`` it appended to
the command line (``["--resume", "--start-step", "200"]``). See ``_tolerate_relaunch_arguments``."""
REFUSED_EXIT_CODE = 3
"""The exit of a relaunch the kit refuses to let start over (``_refuse_a_fresh_start``)."""
TEMPORARY_SUFFIX = ".tmp"
REPLACE_ATTEMPTS = 8
"""``os.replace`` onto a file another process holds open fails on Windows (an antivirus, a
reader of the old checkpoint): tried this many times, waiting a little longer each time."""

_LOADED_AT = time.time()
"""When the kit was loaded (at the top of the script, before anything it saves): ``checkpoint(...,
only_if_written=True)`` announces only what changed since."""
_print_lock = threading.Lock()
_state_lock = threading.Lock()
_stop_reason: str | None = None
_handlers_installed = False
_interrupts = 0
_resume_path_taken: tuple[str | None] | None = None
"""What ``resume_path()`` took off ``sys.argv`` (a 1-tuple once it has read it)."""
_resume_asked = False
"""``resume_step()`` or ``resume_path()`` was called: the trainer reads the relaunch's resume."""
_relaunch_arguments_taken: list[str] = []
"""The relaunch's resume arguments a command-line parser did not declare, which the kit took from
its leftovers (``_tolerate_relaunch_arguments``)."""


# --------------------------------------------------------------------------- announcing


def _plain(value: object) -> object:
    """A value JSON can carry: numbers, strings, booleans; a tensor or numpy scalar as its number."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return _plain(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)


def _whole(value: object) -> int:
    """A step or total as an int: a tensor's or numpy scalar's ``.item()`` too."""
    number = _plain(value)
    if isinstance(number, bool) or not isinstance(number, (int, float)):
        raise TypeError(f"a step must be a whole number, not {value!r}")
    return int(number)


def _emit(event: dict[str, object]) -> None:
    """Print one ``@arena`` line; a failed write is dropped (nothing printed may fail the run)."""
    payload = {key: _plain(value) for key, value in event.items() if value is not None}
    payload["protocol"] = PROTOCOL
    line = PREFIX + json.dumps(payload, ensure_ascii=True) + "\n"
    stream = sys.stdout
    if stream is None:  # pythonw, or a closed console
        return
    with _print_lock:
        try:
            stream.write(line)
            stream.flush()
        except (OSError, ValueError):
            pass


def progress(
    step: int, total: int | None = None, loss: object = None, lr: object = None, **metrics: object
) -> None:
    """Announce progress: ``@arena {"event": "progress", "step": ..., "total": ..., "loss": ..., "lr": ...}``.

    ``loss`` and ``lr`` may be tensors (their ``.item()`` is taken); other
    keyword arguments (``grad_norm=...``) are carried in the same line.
    """
    _refuse_a_fresh_start()
    event = {"event": "progress", "step": _whole(step), "total": None if total is None else _whole(total)}
    event["loss"] = loss
    event["lr"] = lr
    for name, value in metrics.items():
        if name not in event:
            event[name] = value
    _emit(event)


def _eval(step: int, loss: object) -> None:
    """Announce a held-out loss (``@arena {"event": "eval", ...}``), as the adapters do."""
    _emit({"event": "eval", "step": _whole(step), "loss": loss})


def checkpoint(step: int, path: str | os.PathLike[str], *, only_if_written: bool = False) -> bool:
    """Announce a checkpoint that is complete on disk, with its ``bytes`` and ``sha256``.

    ``path`` is announced as given (relative paths are relative to the
    trainer's working folder): a relaunch's ``{path}`` is this string. A
    folder is announced with the digest of its manifest (see the module's
    docstring). Raises ``FileNotFoundError`` when nothing is at ``path``:
    announcing a checkpoint that does not exist would mislead the relaunch.

    ``only_if_written`` (an arena-ls addition to contract 8.1's ``checkpoint(step, path)``):
    announce only when something at ``path`` was written since the kit was loaded (the file's
    modification time; for a folder, its own or any file's under it), else do nothing. It is
    for a framework's manager that decides by itself whether a call saves (torchtitan's
    ``checkpointer.save``, on its interval, not when checkpointing is off): one line after its
    call, ``arena.checkpoint(step, folder, only_if_written=True)``, and a folder an earlier
    process left at that path is never announced as this run's. Returns whether it announced.
    """
    _refuse_a_fresh_start()
    name = os.fspath(path)
    if only_if_written and not _written_since_loaded(name):
        return False
    size, sha256 = digest(name)
    _emit({"event": "checkpoint", "step": _whole(step), "path": name, "bytes": size, "sha256": sha256})
    return True


def _written_since_loaded(name: str) -> bool:
    """Whether the file at ``name``, or the folder or a file under it, changed since the kit loaded."""
    try:
        if os.stat(name).st_mtime >= _LOADED_AT:
            return True
    except OSError:
        return False
    if not os.path.isdir(name):
        return False
    for relative in _files_under(name):
        with contextlib.suppress(OSError):
            if os.stat(os.path.join(name, relative)).st_mtime >= _LOADED_AT:
                return True
    return False


def digest(path: str | os.PathLike[str]) -> tuple[int, str]:
    """``(bytes, sha256)`` of a checkpoint file, or of a checkpoint folder's manifest."""
    name = os.fspath(path)
    if os.path.isdir(name):
        return _folder_digest(name)
    if not os.path.isfile(name):
        raise FileNotFoundError("no checkpoint at " + repr(name))
    return _file_digest(name)


def _file_digest(name: str) -> tuple[int, str]:
    hasher = hashlib.sha256()
    size = 0
    with open(name, "rb") as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            size += len(block)
            hasher.update(block)
    return size, hasher.hexdigest()


def _folder_digest(folder: str) -> tuple[int, str]:
    lines = []
    total = 0
    for relative in _files_under(folder):
        size, sha256 = _file_digest(os.path.join(folder, *relative.split("/")))
        total += size
        lines.append(sha256 + "  " + str(size) + "  " + relative + "\n")
    manifest = "".join(lines).encode("utf-8", "surrogateescape")
    return total, hashlib.sha256(manifest).hexdigest()


def _files_under(folder: str) -> list[str]:
    """The regular files under ``folder``, as sorted ``/``-separated relative paths."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in files:
            full = os.path.join(root, name)
            if os.path.isfile(full):
                found.append(os.path.relpath(full, folder).replace(os.sep, "/"))
    return sorted(found)


# --------------------------------------------------------------------------- saving


@overload
def save(obj: object, path: str | os.PathLike[str], step: int) -> str: ...


@overload
def save(obj: object, path: str | os.PathLike[str], step: int, every: int | None = None) -> str | None: ...


def save(obj: object, path: str | os.PathLike[str], step: int, every: int | None = None) -> str | None:
    """``torch.save(obj)`` to ``path`` atomically, then announce it; returns the path.

    The object is written to a temporary file in the same folder (same disk),
    flushed and fsynced, then renamed over ``path`` with ``os.replace``: a
    kill in the middle of the save leaves the previous checkpoint whole, and
    the next save to ``path`` removes the temporary the killed process left
    (``remove_stale_temporaries``). The folder is created when it does not exist.

    ``every`` (an arena-ls addition to contract 8.1's ``save(obj, path, step)``):
    save only when ``due(step, every)``, that is every ``every`` steps (step 0
    excepted) and at every call once a stop was asked; otherwise nothing is
    written and None is returned. So a loop that never saved needs one line,
    ``arena.save({...}, "ckpt.pt", step, every=200)``, and no guard of its own.
    ``obj`` is built at every call: build it of ``state_dict()`` s (references,
    not copies), and save the last step with a call without ``every``.
    """
    _refuse_a_fresh_start()  # before anything is written over
    if every is not None and not due(step, every):
        return None
    import torch  # only now: a trainer that never saves with the kit never imports it here

    name = os.fspath(path)
    folder = os.path.dirname(name) or "."
    os.makedirs(folder, exist_ok=True)
    remove_stale_temporaries(name)
    temporary = os.path.join(folder, "." + os.path.basename(name) + "." + str(os.getpid()) + TEMPORARY_SUFFIX)
    try:
        with open(temporary, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        _replace(temporary, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(folder)
    checkpoint(step, name)
    return name


def due(step: int, every: int) -> bool:
    """Whether a checkpoint is due at ``step``: every ``every`` steps, or a stop was asked.

    An arena-ls addition to contract 8.1, for a save the kit does not make
    (``if arena.due(step, every=200): accelerator.save_state(folder)``, then
    ``arena.checkpoint(step, folder)``): True when ``step`` is a positive
    multiple of ``every``, and at every call once a stop was asked (the stop
    file, or a signal after ``should_stop()`` installed the handlers; this call
    installs none, so Ctrl-C keeps its meaning in a trainer that never asks).
    """
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError("every must be a whole number of steps, at least 1, not " + repr(every))
    step = _whole(step)
    if step > 0 and step % every == 0:
        return True
    return _stop_asked()


def _stop_asked() -> bool:
    """``should_stop()`` without installing the handlers (a signal counts once they are)."""
    global _stop_reason
    if _stop_reason is not None:
        return True
    stop_file = os.environ.get(STOP_FILE_VARIABLE)
    if stop_file and os.path.exists(stop_file):
        _stop_reason = "stop file"
        return True
    return False


def remove_stale_temporaries(path: str | os.PathLike[str]) -> list[str]:
    """Remove what a save of ``path`` killed mid-write left: ``.NAME.PID.tmp`` in its folder
    whose process is gone. A live process's (another save under way, this one's own, a PID that
    cannot be read) is never touched, nor any other file. Returns the paths removed; a removal
    that fails is left for the next save (a cleanup never fails the save it precedes)."""
    name = os.fspath(path)
    folder = os.path.dirname(name) or "."
    prefix = "." + os.path.basename(name) + "."
    removed: list[str] = []
    try:
        entries = os.listdir(folder)
    except OSError:
        return removed
    for entry in entries:
        if not (entry.startswith(prefix) and entry.endswith(TEMPORARY_SUFFIX)):
            continue
        pid = entry[len(prefix) : -len(TEMPORARY_SUFFIX)]
        if not (pid.isascii() and pid.isdigit()) or _process_alive(int(pid)):
            continue
        stale = os.path.join(folder, entry)
        with contextlib.suppress(OSError):
            if os.path.isfile(stale) and not os.path.islink(stale):
                os.unlink(stale)
                removed.append(stale)
    return removed


def _process_alive(pid: int) -> bool:
    """Whether ``pid`` may be a live process (True whenever it cannot be told: keep the file)."""
    if pid <= 0 or pid == os.getpid():
        return True
    if os.name == "nt":
        return _windows_process_alive(pid)
    try:
        os.kill(pid, 0)  # POSIX: signal 0 only asks whether the process exists
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: it exists, another user's
        return True
    return True


def _windows_process_alive(pid: int) -> bool:
    """Windows: ``os.kill`` would terminate the process, so ask ``OpenProcess`` instead."""
    import ctypes

    kernel32 = getattr(ctypes, "windll").kernel32  # noqa: B009 (no ``windll`` off Windows)
    query_limited_information, still_active, invalid_parameter = 0x1000, 259, 87
    try:
        handle = kernel32.OpenProcess(query_limited_information, False, pid)
    except (OSError, OverflowError, ctypes.ArgumentError):
        return True
    if not handle:
        return bool(kernel32.GetLastError() != invalid_parameter)  # none such; anything else: keep
    try:
        code = ctypes.c_ulong()
        if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
            return True
        return code.value == still_active
    finally:
        kernel32.CloseHandle(handle)


def _replace(source: str, target: str) -> None:
    for attempt in range(REPLACE_ATTEMPTS):
        try:
            os.replace(source, target)
            return
        except PermissionError:  # Windows: the target is open elsewhere for a moment
            if attempt == REPLACE_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (2**attempt))


def _fsync_folder(folder: str) -> None:
    """Make the rename itself durable (POSIX; Windows cannot open a folder for this)."""
    if os.name != "posix":
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- stopping


def _stop_signals() -> list[int]:
    names = ["SIGTERM", "SIGINT"]
    if sys.platform == "win32":
        names.append("SIGBREAK")  # what CTRL_BREAK_EVENT raises: the agent's stop signal there
    return [getattr(signal, name) for name in names if hasattr(signal, name)]


def _on_signal(signum: int, frame: object) -> None:
    """Only record the request: the loop saves at a step boundary (saving here is unsafe).

    A second SIGINT (Ctrl-C pressed again by a person at the console) interrupts
    at once, as Python's own handler would.
    """
    global _stop_reason, _interrupts
    if signum == signal.SIGINT:
        _interrupts += 1
        if _interrupts > 1:
            raise KeyboardInterrupt
    if _stop_reason is None:
        try:
            _stop_reason = signal.Signals(signum).name
        except ValueError:
            _stop_reason = "signal " + str(signum)


def _install_handlers(force: bool = False) -> bool:
    """Install the stop handlers once, from the main thread; False when that is not possible yet.

    Python allows ``signal.signal`` only in the main thread of the main
    interpreter: called from another thread (a framework's worker), nothing is
    installed, nothing is raised, and the next call from the main thread does it.
    """
    global _handlers_installed
    if _handlers_installed and not force:
        return True
    if threading.current_thread() is not threading.main_thread():
        return False
    with _state_lock:
        if _handlers_installed and not force:
            return True
        try:
            for signum in _stop_signals():
                signal.signal(signum, _on_signal)
        except (ValueError, OSError, RuntimeError):  # not the main interpreter, or an embedding
            return False
        _handlers_installed = True
    return True


def should_stop() -> bool:
    """Whether a cooperative stop was asked for: save a checkpoint, announce it, exit 0.

    True once the stop file (``ARENA_STOP_FILE``) exists or SIGTERM, SIGINT
    or (Windows) CTRL_BREAK arrived; it stays true. The first call installs
    the signal handlers, which only set a flag: call it once early (before
    the first step) so that a signal during start-up is a stop too.
    """
    _install_handlers()
    return _stop_asked()


def stop_reason() -> str | None:
    """What asked for the stop (``"stop file"``, ``"SIGTERM"``...), or None."""
    return _stop_reason


# --------------------------------------------------------------------------- resuming


def resume_step(argv: Sequence[str] | None = None) -> int | None:
    """The step this launch resumes from, or None for a fresh start.

    From ``ARENA_RESUME_STEP`` when the supervisor sets it, else from the
    command line: ``--start-step N`` (or ``--start-step=N``,
    ``--start_step``, ``--resume-step``), which the default ``resume.args``
    (``["--resume", "--start-step", "{step}"]``) passes on every relaunch.
    A value that is not a non-negative integer raises ``ValueError``: a
    resume that cannot be read must not quietly start from scratch.
    """
    global _resume_asked
    _resume_asked = True
    value = os.environ.get(RESUME_STEP_VARIABLE)
    if not value:
        value = _option_value(sys.argv[1:] if argv is None else list(argv), RESUME_STEP_OPTIONS)
    if value is None:
        return None
    if not re.fullmatch(r"\s*\d+\s*", value):
        raise ValueError("the resume step must be a non-negative integer, not " + repr(value))
    return int(value)


def resume_path(argv: Sequence[str] | None = None) -> str | None:
    """The checkpoint this launch resumes from, or None for a fresh start.

    From ``--resume-path PATH`` (or ``--resume-path=PATH``, ``--resume_path``),
    which ``resume.args`` ``["--resume-path", "{path}"]`` passes on every
    relaunch with the path of the checkpoint the kit announced last. For a
    framework that resumes from a path: ``trainer.fit(model, ckpt_path=path)``.

    Read from ``sys.argv`` (``argv`` None), the option is also taken off
    ``sys.argv``, so a command-line parser that does not know it
    (``LightningCLI``, argparse) does not refuse the run: call it before that
    parser reads the command line. Later calls give the same path (it is no
    longer on ``sys.argv``, and a second call must not start from scratch).
    An empty path raises ``ValueError``: a resume that cannot be read must
    not quietly start from scratch.
    """
    global _resume_path_taken, _resume_asked
    _resume_asked = True
    if argv is not None:
        value = _option_value(list(argv), RESUME_PATH_OPTIONS)
    else:
        value = _option_value(sys.argv[1:], RESUME_PATH_OPTIONS)
        with _state_lock:
            if value is None and _resume_path_taken is not None:
                value = _resume_path_taken[0]
            else:
                _resume_path_taken = (value,)
            sys.argv[1:] = _without_options(sys.argv[1:], RESUME_PATH_OPTIONS)
    if value is None:
        return None
    if not value.strip():
        raise ValueError("the resume path must name a checkpoint, not " + repr(value))
    return value


def _without_options(arguments: Sequence[str], names: Sequence[str]) -> list[str]:
    """``arguments`` less every ``--x VALUE`` and ``--x=VALUE`` of ``names`` (up to a ``--``)."""
    kept: list[str] = []
    skip = False
    for index, argument in enumerate(arguments):
        if skip:
            skip = False
            continue
        if argument == "--":
            kept.extend(arguments[index:])
            break
        if argument in names and index + 1 < len(arguments):
            skip = True
            continue
        if any(argument.startswith(name + "=") for name in names):
            continue
        kept.append(argument)
    return kept


def _option_value(arguments: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of ``names`` given on the command line (``--x N`` or ``--x=N``)."""
    found = None
    for index, argument in enumerate(arguments):
        if argument == "--":
            break
        for name in names:
            if argument == name and index + 1 < len(arguments):
                found = arguments[index + 1]
            elif argument.startswith(name + "="):
                found = argument[len(name) + 1 :]
    return found


def _tolerate_relaunch_arguments() -> None:
    """Let an argparse parser that does not declare them accept a relaunch's resume arguments.

    arena-ls relaunches a trainer with ``resume.args`` appended (by default
    ``--resume --start-step N``) and names them in ``ARENA_RESUME_ARGS``. A
    script that reads its step with ``resume_step()`` may have a parser of its
    own that declares neither option; ``parse_args()`` would then exit
    ("unrecognized arguments") and the relaunch fail. So, on a launch that
    resumes only, the kit takes exactly those arguments from the leftovers of
    any parser reading ``sys.argv`` (``parse_args()``, ``parse_known_args()``
    with no arguments given). A parser that declares an option still gets its
    value (a declared option is no leftover), and nothing changes outside
    arena-ls or on a fresh launch. Taking an argument could hide a resume from
    a script that reads neither the option nor ``resume_step()``; such a
    script is refused at its first announcement (``_refuse_a_fresh_start``),
    before it can save over its checkpoints.
    """
    raw = os.environ.get(RESUME_ARGS_VARIABLE)
    if not raw:
        return
    try:
        appended = json.loads(raw)
    except ValueError:
        return
    if not isinstance(appended, list) or not appended or not all(isinstance(a, str) for a in appended):
        return
    import argparse

    original = argparse.ArgumentParser.parse_known_args
    if getattr(original, "_arena_relaunch", False):  # the kit loaded twice (a copy and the package)
        return

    def parse_known_args(self: Any, args: Any = None, namespace: Any = None) -> Any:
        parsed, extras = original(self, args, namespace)
        if args is None and extras:
            extras = _take_relaunch_arguments(extras, appended)
        return parsed, extras

    parse_known_args._arena_relaunch = True  # type: ignore[attr-defined]
    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]


def _take_relaunch_arguments(extras: list[str], appended: Sequence[str]) -> list[str]:
    """``extras`` less the relaunch's ``appended`` arguments among them (each once), recorded."""
    wanted = list(appended)
    kept: list[str] = []
    for argument in extras:
        if argument in wanted:
            wanted.remove(argument)
            with _state_lock:
                _relaunch_arguments_taken.append(argument)
        else:
            kept.append(argument)
    return kept


def _carries_a_value(argument: str) -> bool:
    """A step or a path (``200``, ``--start-step=200``), not a bare switch such as ``--resume``."""
    return not argument.startswith("-") or "=" in argument


def _refuse_a_fresh_start() -> None:
    """Exit a relaunch whose resume the script never read, before its first announcement.

    The kit took resume arguments its parser does not declare, a step or a path
    among them (``_tolerate_relaunch_arguments``), and the script asked neither
    ``resume_step()`` nor ``resume_path()``: it is about to train from its
    first step and save over the checkpoints it was relaunched to resume from.
    A bare switch taken alone (``--resume`` beside a ``--start-step`` the
    parser declares) refuses nothing: the script reads its step itself.
    It exits at once (``REFUSED_EXIT_CODE``), saying why; arena-ls counts a
    failed relaunch and, past ``maxRestarts``, ends the run with the reason in
    its log. Nothing is saved.
    """
    if _resume_asked or not any(_carries_a_value(argument) for argument in _relaunch_arguments_taken):
        return  # nothing taken, or only a bare switch (``--resume``): the step is the script's to read
    taken = " ".join(_relaunch_arguments_taken)
    message = (
        f"arena_trainer: this relaunch resumes ({taken}), but the script's parser does not declare "
        "those options and it never called arena_trainer.resume_step() or resume_path(): it would "
        "start over its checkpoints, so it stops here. Call resume_step() before training, or declare "
        "the options and read them."
    )
    stream = sys.stderr
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):
            stream.write(message + "\n")
            stream.flush()
    os._exit(REFUSED_EXIT_CODE)


# --------------------------------------------------------------------------- memory


def _torch_if_loaded() -> Any:
    """torch when the trainer has imported it (the kit never imports it for these)."""
    return sys.modules.get("torch")


def _is_out_of_memory(error: BaseException) -> bool:
    torch = _torch_if_loaded()
    if torch is not None:
        kinds = tuple(
            kind
            for kind in (
                getattr(torch, "OutOfMemoryError", None),
                getattr(torch.cuda, "OutOfMemoryError", None),
            )
            if isinstance(kind, type)
        )
        if kinds and isinstance(error, kinds):
            return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def _release_cached_memory() -> bool:
    torch = _torch_if_loaded()
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return False
    torch.cuda.empty_cache()
    return True


def oom_retry(step_fn: Callable[[], T], retries: int = 3) -> T:
    """``step_fn()``, tried again up to ``retries`` times after a GPU out-of-memory error.

    Catches ``torch.cuda.OutOfMemoryError`` / ``torch.OutOfMemoryError`` (and
    a ``RuntimeError`` saying "out of memory"); between attempts the failed
    attempt's tensors are released and the CUDA cache is emptied, then the
    same batch is tried again. Returns what ``step_fn`` returns; re-raises
    the last error when every attempt failed. ``step_fn`` should zero the
    gradients first and step the optimizer last, so that a retry never
    applies an update twice.
    """
    if retries < 0:
        raise ValueError("retries must not be negative")
    attempt = 0
    while True:
        try:
            return step_fn()
        except Exception as error:
            if not _is_out_of_memory(error) or attempt >= retries:
                raise
        # Outside the handler: the exception, its traceback and the tensors they held are gone.
        attempt += 1
        gc.collect()
        _release_cached_memory()
        _say(f"out of memory: emptied the cache, trying the same batch again ({attempt}/{retries})")


def empty_cache(step: int, every: int = 50) -> bool:
    """Empty the CUDA cache every ``every`` steps (the gates ask for 10 to 100); True when it did.

    Returns cached, fragmented blocks to the driver, so a long run does not
    die of fragmentation. Does nothing without CUDA or before torch is imported.
    """
    if every < 1:
        raise ValueError("every must be at least 1")
    step = _whole(step)
    if step <= 0 or step % every:
        return False
    return _release_cached_memory()


def _say(text: str) -> None:
    """A plain line for the run's log (ASCII, dropped if stdout is gone)."""
    stream = sys.stdout
    if stream is None:
        return
    with _print_lock:
        try:
            stream.write("arena_trainer: " + text + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass


# --------------------------------------------------------------------------- framework adapters

_ADAPTERS: dict[str, type] = {}


def __getattr__(name: str) -> type:
    """``HFCallback`` and ``LightningCallback``, built when first named (their framework imported then)."""
    if name == "HFCallback":
        if name not in _ADAPTERS:
            _ADAPTERS[name] = _build_hf_callback()
        return _ADAPTERS[name]
    if name == "LightningCallback":
        package = _lightning_package()
        key = name + ":" + package.__name__
        if key not in _ADAPTERS:
            _ADAPTERS[key] = _build_lightning_callback(package)
        return _ADAPTERS[key]
    raise AttributeError("module 'arena_trainer' has no attribute " + repr(name))


def _build_hf_callback() -> type:
    from transformers import TrainerCallback

    class HFCallback(TrainerCallback):  # type: ignore[misc,unused-ignore]
        """arena-ls's callback for ``transformers.Trainer``.

        Progress and loss from ``on_log``; each ``checkpoint-N`` folder announced
        from ``on_save`` (after the folder is written); the CUDA cache emptied
        every ``empty_cache_every`` steps; a stop (the stop file or a signal) turns
        into ``should_save`` and ``should_training_stop`` at the end of the step,
        so the run ends with a checkpoint ``resume_from_checkpoint`` takes.
        """

        def __init__(self, empty_cache_every: int = 50) -> None:
            self.empty_cache_every = empty_cache_every
            self.stopping = False

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            should_stop()  # installs the handlers before the first step

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            empty_cache(state.global_step, self.empty_cache_every)
            if should_stop():
                if not self.stopping:
                    self.stopping = True
                    _say(f"stop asked ({stop_reason()}): saving a checkpoint at step {state.global_step}")
                control.should_save = True
                control.should_training_stop = True
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> Any:
            if not state.is_world_process_zero or not logs:
                return
            if "eval_loss" in logs:
                _eval(state.global_step, logs["eval_loss"])
                return
            if "loss" not in logs:
                return  # the summary at the end (train_loss, train_runtime): no step's loss
            extra = {key: value for key, value in logs.items() if key in ("grad_norm", "epoch")}
            progress(
                state.global_step,
                state.max_steps or None,
                loss=logs["loss"],
                lr=logs.get("learning_rate"),
                **extra,
            )

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if not state.is_world_process_zero:
                return
            folder = os.path.join(args.output_dir, "checkpoint-" + str(state.global_step))
            if os.path.isdir(folder):
                checkpoint(state.global_step, folder)

    return HFCallback


def _lightning_package() -> Any:
    """The Lightning the trainer uses: ``lightning.pytorch`` or ``pytorch_lightning``.

    Whichever the trainer has imported (``lightning.pytorch`` when both are);
    neither yet: ``lightning.pytorch``, else ``pytorch_lightning``.
    """
    if "lightning.pytorch" in sys.modules:
        return sys.modules["lightning.pytorch"]
    if "pytorch_lightning" in sys.modules:
        return sys.modules["pytorch_lightning"]
    try:
        return importlib.import_module("lightning.pytorch")
    except ImportError:
        return importlib.import_module("pytorch_lightning")


def _build_lightning_callback(package: Any) -> type:
    class LightningCallback(package.Callback):  # type: ignore[misc]
        """arena-ls's callback for a Lightning ``Trainer``.

        Announces progress every ``log_every_n_steps`` and every checkpoint the
        trainer writes, right after the file exists (``on_save_checkpoint`` runs
        before it does, so the strategy's save is followed instead); empties the
        CUDA cache every ``empty_cache_every`` steps; on a stop, saves
        ``<checkpoint folder>/arena-stop-step-N.ckpt``, announces it and sets
        ``trainer.should_stop``, so ``fit(ckpt_path=...)`` resumes from it.
        """

        def __init__(self, empty_cache_every: int = 50, stop_dir: str | None = None) -> None:
            super().__init__()
            self.empty_cache_every = empty_cache_every
            self.stop_dir = stop_dir
            self.stopped_at: int | None = None

        def setup(self, trainer: Any, pl_module: Any, stage: Any) -> Any:
            should_stop()
            _follow_saves(trainer.strategy)

        def on_train_start(self, trainer: Any, pl_module: Any) -> Any:
            # fit() has just put its own SIGTERM handler over ours (it would end the run
            # with no checkpoint after the batch): ours again, so a stop saves first.
            _install_handlers(force=True)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: Any
        ) -> Any:
            step = trainer.global_step
            every = getattr(trainer, "log_every_n_steps", 50) or 50
            if trainer.is_global_zero and (step % every == 0 or step == trainer.max_steps):
                progress(
                    step,
                    trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None,
                    loss=_batch_loss(outputs),
                    lr=_first_lr(trainer),
                )
            empty_cache(step, self.empty_cache_every)
            if should_stop() and self.stopped_at is None:
                self.stopped_at = step
                _say(f"stop asked ({stop_reason()}): saving a checkpoint at step {step}")
                trainer.save_checkpoint(self._stop_path(trainer, step))  # every rank: rank 0 writes
                trainer.should_stop = True

        def on_validation_end(self, trainer: Any, pl_module: Any) -> Any:
            loss = trainer.callback_metrics.get("val_loss")
            if loss is not None and trainer.is_global_zero and not trainer.sanity_checking:
                _eval(trainer.global_step, loss)

        def _stop_path(self, trainer: Any, step: Any) -> Any:
            folder = self.stop_dir
            if folder is None:
                saver = getattr(trainer, "checkpoint_callback", None)
                folder = getattr(saver, "dirpath", None) or os.path.join(
                    trainer.default_root_dir, "checkpoints"
                )
            return os.path.join(os.fspath(folder), "arena-stop-step-" + str(step) + ".ckpt")

    return LightningCallback


def _follow_saves(strategy: Any) -> None:
    """Announce each checkpoint the strategy writes, once the file is complete (rank 0)."""
    original = strategy.save_checkpoint
    if getattr(original, "_arena_follows", False):
        return

    def save_checkpoint(checkpoint_dict: Any, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(checkpoint_dict, filepath, *args, **kwargs)
        name = os.fspath(filepath)
        if strategy.is_global_zero and os.path.exists(name):
            checkpoint(int(checkpoint_dict.get("global_step", 0)), name)
        return result

    save_checkpoint._arena_follows = True  # type: ignore[attr-defined]
    strategy.save_checkpoint = save_checkpoint


def _batch_loss(outputs: object) -> object:
    if isinstance(outputs, dict):
        return outputs.get("loss")
    return outputs


def _first_lr(trainer: Any) -> object:
    try:
        return trainer.optimizers[0].param_groups[0]["lr"]
    except (AttributeError, IndexError, KeyError, TypeError):
        return None


_tolerate_relaunch_arguments()
