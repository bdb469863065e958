"""Suite-wide: tests that need POSIX signals are skipped on Windows, each naming its Windows variant.

Kept here, by test id, so that the test files themselves stay as they are.
The Windows variants live in ``tests/windows/test_on_windows.py`` (see
docs/windows.md, which also says that no Windows runner has run them yet).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator

import pytest

from tests.helpers import fuzzing, process_marker, rayhead, xdist_groups

pytest_plugins = ("pytester",)  # tests/unit/test_process_marker.py runs small suites in-process

# pytest keeps the test modules it rewrote for their asserts (tests/**/__pycache__, ignored by git)
# only where Python may write bytecode. This project's machines, as many containers, set
# PYTHONDONTWRITEBYTECODE: then every run, in each of its -n workers, rewrote all 350 test modules
# again (5-11 s of a fast run's collection, of 2 s). The suite's own processes write them; the
# servers, agents and trainers it starts keep the environment's choice (docs/performance.md).
sys.dont_write_bytecode = False

# One OpenMP thread for every PyTorch the suite runs, in a worker (the kit's tests) or started by
# a server (the reference trainer, the frameworks' trainers: they inherit this environment; a
# manifest's own `env` still wins). The suite runs four workers on two cores, and PyTorch's default
# (a thread per core) spins its second thread for nothing when the cores are taken: the reference
# trainer's 60 steps beside two CPU hogs took 20-24 s of CPU on two threads, 8 s on one, and 31-38
# s against 13-14 s of wall time (docs/performance.md, "One thread per trainer"). Set before any
# test imports PyTorch, which reads it once. `scripts/test.sh` sets it for CI's other lanes.
os.environ.setdefault("OMP_NUM_THREADS", "1")

_VARIANTS = "tests/windows/test_on_windows.py"
POSIX_ONLY: dict[str, str] = {
    "tests/lifecycle/test_resilience.py::test_kill_9_of_the_trainer_relaunches_from_its_checkpoint": (
        f"SIGKILL; Windows variant: {_VARIANTS}::test_terminating_the_trainer_relaunches_from_its_checkpoint"
    ),
    "tests/lifecycle/test_resilience.py::test_kill_9_of_the_agent_takes_the_trainer_down": (
        "SIGKILL; Windows variant: "
        f"{_VARIANTS}::test_terminating_the_agent_takes_the_trainer_down_through_its_job"
    ),
    "tests/lifecycle/test_lifecycle.py::test_stop_kills_a_stubborn_tree_after_the_grace_window": (
        f"expects SIGKILL; Windows variant: {_VARIANTS}::test_stop_kills_a_stubborn_tree_through_its_job"
    ),
    "tests/lsp/test_progress_and_metrics.py::test_reference_trainer_resumes_the_same_loss_curve": (
        "kills the trainer with SIGKILL (the Windows relaunch is covered by "
        f"{_VARIANTS}::test_terminating_the_trainer_relaunches_from_its_checkpoint)"
    ),
    "tests/trainer/test_reference_trainer.py::test_resume_after_sigkill_continues_the_same_loss_curve": (
        "kills the trainer with SIGKILL"
    ),
    "tests/trainer/test_reference_trainer.py::test_sigterm_is_a_cooperative_stop": (
        "SIGTERM to one process has no Windows equivalent (arena stops Windows trainers by the stop file)"
    ),
}
"""The SIGINT tests of tests/client/test_cli.py carry their own skip (``POSIX_ONLY`` there)."""


def pytest_configure(config: pytest.Config) -> None:
    """The ``process`` marker, set on every test that starts a process (tests/helpers/process_marker.py),
    the groups of tests that share a worker under ``pytest -n`` (tests/helpers/xdist_groups.py),
    and how many examples a property test tries (tests/helpers/fuzzing.py)."""
    fuzzing.register(config)
    process_marker.register(config)
    xdist_groups.register(config)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection loaded (every test module, the frameworks some import) lives as long as the
    run: moved out of the garbage collector's walks (``gc.freeze``), so that a test's own
    ``gc.collect()`` (the kit's OOM retry, the task-keeping tests) walks what the tests made, not
    a quarter of a second of modules each time."""
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Frozen again as the process ends: its last collection, at exit, then walks nothing. A worker
    that imported PyTorch, transformers and Lightning (the kit's adapters) spent 1.1 s exiting
    walking their objects, the whole run waiting for it; 0.15 s frozen."""
    gc.freeze()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if sys.platform != "win32":
        return
    for item in items:
        reason = POSIX_ONLY.get(item.nodeid.split("[", 1)[0])
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"POSIX only: {reason}"))


@pytest.fixture(scope="package")
def ray_head() -> Iterator[rayhead.RayHead]:
    """A real Ray head on loopback, one per test package that asks for it (tests/cluster, and
    the Neovim cluster case in tests/editor), ended after that package's last test, so the head
    (about 0.7 GiB and some idle CPU) does not weigh on the rest of the suite.

    Skipped, saying why, only when ``ray`` is not installed (CI installs it) or on Windows.
    """
    if sys.platform == "win32":
        pytest.skip("the test head is ended through its POSIX process group; Windows is not covered")
    if not rayhead.ray_installed():
        pytest.skip("ray is not installed: pip install 'arena-ls[ray]' (CI installs it)")
    with rayhead.ray_head() as head:
        yield head
