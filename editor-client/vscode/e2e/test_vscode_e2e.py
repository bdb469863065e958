"""The extension in a real VS Code: code-server 4.100.3 driven by Debian's Chromium.

Run by ``e2e/run.sh`` (which installs what it needs with ``e2e/setup.sh``),
with these variables:

- ``ARENA_E2E_CODE_SERVER``: the ``code-server`` executable;
- ``ARENA_E2E_VSIX``: the packaged extension;
- ``ARENA_E2E_SERVER_PYTHON``: an interpreter that has arena-ls (the
  worktree's ``.venv``), written to ``arena.interpreter``;
- ``ARENA_E2E_REPO``: the repository, whose ``training/`` folder is the workspace;
- ``ARENA_E2E_SCREENSHOTS``: where screenshots and logs go: of a failed test, and of three states of the
  local session that a person should look at (the reference job running, a gated trainer's diagnostics,
  a stop after its question), pass or fail.

The cluster test starts a real Ray head with that interpreter
(``python -m tests.helpers.rayhead``: this venv has no Ray) and skips, saying
why, only when it has no Ray (``scripts/bootstrap.sh`` installs it, so CI
runs it).

Every wait is for a condition in the page (or on disk) with a deadline;
nothing sleeps hoping that something happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

T = TypeVar("T")

CODE_SERVER = os.environ.get("ARENA_E2E_CODE_SERVER", "code-server")
VSIX = Path(os.environ.get("ARENA_E2E_VSIX", "arena-ls.vsix"))
SERVER_PYTHON = os.environ.get("ARENA_E2E_SERVER_PYTHON", "python3")
REPO = Path(os.environ.get("ARENA_E2E_REPO", Path(__file__).resolve().parents[3]))
SCREENSHOTS = Path(os.environ.get("ARENA_E2E_SCREENSHOTS", Path(__file__).parent / "screenshots"))

# Generous: the machine may be loaded (2 cores shared by many processes).
STARTUP_TIMEOUT = 180.0
UI_TIMEOUT = 60.0
RUN_TIMEOUT = 240.0

BROKEN_TRAINER = '''"""A trainer that cannot be stopped or resumed safely: arena's gates say why."""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()
for step in range(args.steps):
    print(f"step {step}")
'''

E2E_JOBS: list[dict[str, Any]] = [
    {
        # First checkpoint at step 500, far past the seconds the test lets it run: a stop asks first.
        "id": "slow-lm",
        "name": "Slow LM (needs approval)",
        "kind": "train",
        "command": "{python}",
        "args": [
            "training/train.py",
            "--steps",
            "20000",
            "--ckpt-every",
            "500",
            "--eval-every",
            "500",
            "--log-every",
            "5",
            "--ckpt-dir",
            "checkpoints/slow-lm",
        ],
        "script": "training/train.py",
        "cwd": ".",
        "env": {"OMP_NUM_THREADS": "1"},
        "status": "approval-required",
        "resume": {"args": ["--resume", "--start-step", "{step}"]},
        "stop": {"method": "both", "graceSeconds": 30},
    },
    {
        # Finishes in seconds with a checkpoint at its last step: running it again asks resume or fresh.
        "id": "quick-lm",
        "name": "Quick LM",
        "kind": "train",
        "command": "{python}",
        "args": [
            "training/train.py",
            "--steps",
            "30",
            "--ckpt-every",
            "10",
            "--eval-every",
            "30",
            "--log-every",
            "2",
            "--ckpt-dir",
            "checkpoints/quick-lm",
        ],
        "script": "training/train.py",
        "cwd": ".",
        "env": {"OMP_NUM_THREADS": "1"},
        "status": "ready",
        "resume": {"args": ["--resume", "--start-step", "{step}"]},
    },
    {
        "id": "broken",
        "name": "Broken trainer",
        "kind": "train",
        "command": "{python}",
        "args": ["broken/train.py"],
        "script": "broken/train.py",
        "cwd": ".",
        "status": "ready",
        "resume": {"args": ["--resume", "--start-step", "{step}"]},
    },
]


# -- plumbing --------------------------------------------------------------------------------


def wait_for(what: str, condition: Callable[[], T | None], timeout: float = UI_TIMEOUT) -> T:
    """Polls ``condition`` until it returns something truthy; fails naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except (StaleElementReferenceException, WebDriverException) as error:
            last_error = error
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}"
                + (f" (last error: {last_error})" if last_error else "")
            )
        time.sleep(0.2)  # the poll interval, not a wait for an event


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_workspace(root: Path) -> Path:
    """The repository's bundled workspace (``training/``) with three jobs for the test appended."""
    workspace = root / "workspace"
    shutil.copytree(REPO / "training", workspace / "training")
    (workspace / "broken").mkdir()
    (workspace / "broken" / "train.py").write_text(BROKEN_TRAINER)
    manifest_path = workspace / "training" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["jobs"].extend(E2E_JOBS)
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return workspace


def write_user_settings(user_data: Path, settings: dict[str, Any]) -> None:
    """Written before launch: code-server does not reload settings edited on disk."""
    folder = user_data / "User"
    folder.mkdir(parents=True, exist_ok=True)
    base = {
        "workbench.startupEditor": "none",
        "workbench.tips.enabled": False,
        "workbench.welcomePage.walkthroughs.openOnInstall": False,
        "security.workspace.trust.enabled": False,
        "telemetry.telemetryLevel": "off",
        "update.mode": "none",
        "extensions.autoCheckUpdates": False,
        "extensions.autoUpdate": False,
        "extensions.ignoreRecommendations": True,
        "remote.autoForwardPorts": False,
        "git.enabled": False,
        "files.watcherExclude": {"**/.aide/**": True, "**/checkpoints/**": True},
        "arena.preflight.minFreeRamMb": 0,
        "arena.preflight.minFreeDiskMb": 0,
        "arena.preflight.requirePluggedIn": False,
        "arena.preflight.gpuContention": "off",
    }
    (folder / "settings.json").write_text(json.dumps({**base, **settings}, indent=2))


class CodeServer:
    """One code-server on 127.0.0.1 with the extension installed, and a headless Chromium on it."""

    def __init__(
        self, root: Path, workspace: Path, interpreter: list[str], settings: dict[str, Any] | None = None
    ) -> None:
        self.root = root
        self.workspace = workspace
        self.user_data = root / "user-data"
        self.extensions = root / "extensions"
        self.config = root / "config.yaml"
        self.port = free_port()
        self.log_path = root / "code-server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.driver: WebDriver | None = None
        write_user_settings(self.user_data, {"arena.interpreter": interpreter, **(settings or {})})
        self.config.write_text(f"bind-addr: 127.0.0.1:{self.port}\nauth: none\ncert: false\n")

    def _base_args(self) -> list[str]:
        return [
            CODE_SERVER,
            "--config",
            str(self.config),
            "--user-data-dir",
            str(self.user_data),
            "--extensions-dir",
            str(self.extensions),
        ]

    def start(self) -> WebDriver:
        env = {**os.environ, "SE_OFFLINE": "true"}
        subprocess.run(
            [*self._base_args(), "--install-extension", str(VSIX)],
            check=True,
            capture_output=True,
            timeout=STARTUP_TIMEOUT,
            env=env,
        )
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                *self._base_args(),
                "--bind-addr",
                f"127.0.0.1:{self.port}",
                "--auth",
                "none",
                "--disable-telemetry",
                "--disable-update-check",
                "--disable-workspace-trust",
                "--disable-getting-started-override",
                str(self.workspace),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        wait_for("code-server to answer /healthz", self._healthy, STARTUP_TIMEOUT)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for argument in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1600,1000",
            "--no-first-run",
            "--disable-extensions",
        ):
            options.add_argument(argument)
        self.driver = webdriver.Chrome(
            options=options, service=Service(executable_path="/usr/bin/chromedriver")
        )
        self.driver.get(f"http://127.0.0.1:{self.port}/?folder={self.workspace}")
        return self.driver

    def _healthy(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(f"code-server exited with {self.process.returncode}: see {self.log_path}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def arena_log(self) -> str:
        """The `Arena` output channel, as code-server writes it to disk."""
        return "\n".join(
            path.read_text(errors="replace")
            for path in sorted(self.user_data.glob("logs/**/arena-ls.arena-ls/*.log"))
        )

    def save_evidence(self, name: str) -> Path:
        folder = SCREENSHOTS / name
        folder.mkdir(parents=True, exist_ok=True)
        if self.driver is not None:
            try:
                self.driver.save_screenshot(str(folder / "screen.png"))
                (folder / "page.html").write_text(self.driver.page_source)
            except WebDriverException as error:
                (folder / "screenshot-failed.txt").write_text(str(error))
        (folder / "Arena.log").write_text(self.arena_log())
        if self.log_path.exists():
            shutil.copy(self.log_path, folder / "code-server.log")
        return folder

    def stop(self) -> None:
        if self.driver is not None:
            with contextlib.suppress(WebDriverException):
                self.driver.quit()
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=20)
        kill_processes_in(self.workspace)


def kill_processes_in(folder: Path) -> None:
    """Job agents and trainers outlive the editor on purpose; a test must not leave its own behind."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if cwd == folder or folder in cwd.parents:
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)


# -- the workbench, as a user sees it -------------------------------------------------------


class Workbench:
    def __init__(self, driver: WebDriver) -> None:
        self.driver = driver

    def status_texts(self) -> list[str]:
        texts: list[str] = self.driver.execute_script(
            "return Array.from(document.querySelectorAll("
            "'#workbench\\\\.parts\\\\.statusbar .statusbar-item'))"
            ".map(e => e.innerText.trim()).filter(t => t)"
        )
        return texts

    def status_item(self, pattern: str, timeout: float = UI_TIMEOUT) -> str:
        regex = re.compile(pattern)
        return wait_for(
            f"a status-bar item matching {pattern!r}",
            lambda: next((text for text in self.status_texts() if regex.search(text)), None),
            timeout,
        )

    def click_status_item(self, text: str) -> None:
        def find() -> WebElement | None:
            for item in self.driver.find_elements(
                By.CSS_SELECTOR, "#workbench\\.parts\\.statusbar .statusbar-item"
            ):
                if item.is_displayed() and item.text.strip() == text:
                    return item
            return None

        wait_for(f"the status-bar item {text!r}", find).click()

    def quick_input(self) -> WebElement:
        return wait_for(
            "the quick input box",
            lambda: next(
                (
                    e
                    for e in self.driver.find_elements(By.CSS_SELECTOR, ".quick-input-widget input.input")
                    if e.is_displayed()
                ),
                None,
            ),
        )

    def quick_rows(self) -> list[WebElement]:
        return [
            row
            for row in self.driver.find_elements(By.CSS_SELECTOR, ".quick-input-widget .monaco-list-row")
            if row.is_displayed()
        ]

    def choose(self, label: str, typed: str | None = None) -> None:
        """Types a filter into the open quick input and clicks the row whose label starts with ``label``."""
        box = self.quick_input()
        if typed is not None:
            box.send_keys(typed)

        def row() -> WebElement | None:
            for candidate in self.quick_rows():
                labels = candidate.find_elements(By.CSS_SELECTOR, ".quick-input-list-label, .label-name")
                if any(element.text.strip().startswith(label) for element in labels):
                    return candidate
            return None

        wait_for(f"the quick-pick row {label!r}", row).click()

    def command(self, title: str) -> None:
        """Runs a command from the palette, by its title."""
        ActionChains(self.driver).send_keys(Keys.F1).perform()
        box = self.quick_input()
        wait_for("the palette's '>' prefix", lambda: (box.get_attribute("value") or "").startswith(">"))
        self.choose(title, typed=title)

    def dialog(self, timeout: float = UI_TIMEOUT) -> WebElement:
        return wait_for(
            "a modal dialog",
            lambda: next(
                (
                    d
                    for d in self.driver.find_elements(By.CSS_SELECTOR, ".monaco-dialog-box")
                    if d.is_displayed()
                ),
                None,
            ),
            timeout,
        )

    def answer_dialog(self, pattern: str, button: str) -> str:
        """Waits for the modal whose text matches ``pattern`` and presses ``button``; returns its text."""
        regex = re.compile(pattern, re.S)
        box = wait_for(
            f"a dialog matching {pattern!r}",
            lambda: next((d for d in [self.dialog()] if regex.search(d.text)), None),
        )
        text: str = box.text
        buttons = box.find_elements(By.CSS_SELECTOR, ".dialog-buttons .monaco-button")
        chosen = next((b for b in buttons if b.text.strip() == button), None)
        assert chosen is not None, f"no button {button!r} in the dialog: {[b.text for b in buttons]}"
        chosen.click()
        # Closed, or replaced by the next question (a resume choice, then the approval).
        wait_for(
            "the dialog to close",
            lambda: (
                not any(
                    d.is_displayed() and d.text == text
                    for d in self.driver.find_elements(By.CSS_SELECTOR, ".monaco-dialog-box")
                )
            ),
        )
        return text

    def editor_text(self, pattern: str, timeout: float = UI_TIMEOUT) -> str:
        """Waits for the visible editor's text to match ``pattern``."""
        regex = re.compile(pattern)

        def text() -> str | None:
            for editor in self.driver.find_elements(
                By.CSS_SELECTOR, ".editor-instance .monaco-editor .view-lines"
            ):
                if editor.is_displayed() and regex.search(editor.text):
                    return str(editor.text)
            return None

        return wait_for(f"an editor showing {pattern!r}", text, timeout)

    def notifications(self) -> list[str]:
        return [
            toast.text
            for toast in self.driver.find_elements(By.CSS_SELECTOR, ".notification-toast")
            if toast.is_displayed()
        ]


def run_job(bench: Workbench, label: str, typed: str) -> None:
    bench.command("Arena: Run Job")
    bench.choose(label, typed=typed)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def session(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[CodeServer, Workbench]]:
    interpreter = getattr(request, "param", None) or [SERVER_PYTHON]
    yield from _started(CodeServer(tmp_path, make_workspace(tmp_path), interpreter), request)


def _started(server: CodeServer, request: pytest.FixtureRequest) -> Iterator[tuple[CodeServer, Workbench]]:
    """The started code-server and its workbench; evidence saved if the test fails; stopped after."""
    try:
        driver = server.start()
        yield server, Workbench(driver)
    except BaseException:
        folder = server.save_evidence(request.node.name)
        print(f"\nscreenshot and logs of the failure: {folder}")
        raise
    finally:
        server.stop()


# -- the tests -------------------------------------------------------------------------------


def test_run_watch_diagnose_approve_stop_and_rerun_fresh(session: tuple[CodeServer, Workbench]) -> None:
    server, bench = session
    bench.status_item(r"^▶ Run$", STARTUP_TIMEOUT)

    # tiny-lm from the palette; its progress in the status bar.
    run_job(bench, "▶ Tiny LM pretraining (demo)", "tiny-lm")
    bench.status_item(r"^■ Stop$")
    bench.status_item(r"^⟳ tiny-lm \d+/600 \(\d+%\)", RUN_TIMEOUT)
    # The status document beside the status bar: the run's checkpoint, record and keep-awake, as a person reads them.
    bench.command("Arena: Show Status")
    bench.editor_text(r"Active run: ⟳ tiny-lm", RUN_TIMEOUT)
    server.save_evidence("1-reference-job-running")  # kept for a person to look at, pass or fail

    # Stop tiny-lm with the Stop item (confirming if asked: it may or may not have a checkpoint by now),
    # before the diagnostics: the reference trainer takes a core while it runs, and in CI that core is
    # the suite's.
    bench.click_status_item("■ Stop")
    wait_for(
        "tiny-lm to stop, confirming if asked", lambda: _stopped_or_confirm(bench, "tiny-lm"), RUN_TIMEOUT
    )
    bench.status_item(r"^▶ Run$")

    # A failing trainer: arena's diagnostics in the Problems panel.
    bench.command("Go to File")
    bench.choose("train.py", typed="broken/train.py")
    bench.command("Problems: Focus on Problems View")
    problems = wait_for(
        "arena diagnostics in the Problems panel",
        lambda: next(
            (
                p.text
                for p in bench.driver.find_elements(By.CSS_SELECTOR, ".markers-panel")
                if re.search(r"AR0\d\d", p.text)
            ),
            None,
        ),
    )
    assert "arena" in problems
    server.save_evidence("2-gated-trainer-diagnostics")

    # The broken job in the picker: every reason, whole, in a dialog (with a filter typed).
    run_job(bench, "⊘ Broken trainer", "broken")
    reasons = bench.answer_dialog(r"Broken trainer cannot run", "Cancel")
    assert len(re.findall(r"• AR\d{3}", reasons)) >= 2, reasons

    # A job that needs approval, then a stop that would lose work: both dialogs answered.
    run_job(bench, "▶ Slow LM (needs approval)", "slow")
    bench.answer_dialog(r"Run slow-lm\? It needs approval", "Run")
    bench.status_item(r"^⟳ slow-lm step \d+|^⟳ slow-lm \d+/20000", RUN_TIMEOUT)
    bench.click_status_item("■ Stop")
    bench.answer_dialog(r"no checkpoint yet; stopping it now loses", "Stop anyway")
    bench.status_item(r"^■ slow-lm stopped", RUN_TIMEOUT)
    server.save_evidence("3-stopped-after-asking")
    bench.status_item(r"^▶ Run$")

    # A finished job run again: asked, and started fresh from step 0.
    run_job(bench, "▶ Quick LM", "quick")
    bench.status_item(r"^✓ quick-lm succeeded 30/30", RUN_TIMEOUT)
    bench.status_item(r"^▶ Run$")

    # Reading the status with nothing running keeps the last run in view; the status document stays open.
    bench.command("Arena: Show Status")
    bench.editor_text(r"Active run: none")
    bench.status_item(r"^✓ quick-lm succeeded 30/30")

    run_job(bench, "▶ Quick LM", "quick")
    bench.answer_dialog(r"Quick LM has finished: its checkpoint is at step 30 of 30", "Start fresh")
    # The open status document follows the run: live, then done.
    bench.editor_text(r"Active run: ⟳ quick-lm", RUN_TIMEOUT)
    bench.status_item(r"^✓ quick-lm succeeded 30/30", RUN_TIMEOUT)
    bench.editor_text(r"Active run: none", RUN_TIMEOUT)
    runs = sorted((server.workspace / ".aide" / "training" / "runs").glob("quick-lm-*/spec.json"))
    assert len(runs) == 2, runs
    assert "--resume" not in json.loads(runs[-1].read_text())["argv"], "the second run resumed"

    # An intentional restart: the last run stays in view, and a clean exit is not an error.
    bench.command("Arena: Restart Server")
    wait_for(
        "the restarted server's clean exit in the Arena log",
        lambda: (
            server.arena_log().count("Starting the server:") == 2
            and "[info] Server process exited with code 0" in server.arena_log()
        ),
    )
    bench.status_item(r"^▶ Run$")
    bench.status_item(r"^✓ quick-lm succeeded 30/30")
    assert "[error] Server process exited with code 0" not in server.arena_log()

    # The Arena channel: the server's lines at their level, with one timestamp each.
    log = server.arena_log()
    assert re.search(r"\[info\] arena_ls", log), log[-2000:]
    assert not re.search(r"\] \d{4}-\d\d-\d\d[ T][\d:,.]+ (INFO|WARNING|ERROR)", log), log[-2000:]


def _stopped_or_confirm(bench: Workbench, job: str) -> bool:
    if any(re.match(rf"^■ {job} stopped", text) for text in bench.status_texts()):
        return True
    for box in bench.driver.find_elements(By.CSS_SELECTOR, ".monaco-dialog-box"):
        if box.is_displayed() and "no checkpoint yet" in box.text:
            for button in box.find_elements(By.CSS_SELECTOR, ".dialog-buttons .monaco-button"):
                if button.text.strip() == "Stop anyway":
                    button.click()
    return False


@pytest.mark.parametrize("session", [["/usr/bin/python3"]], indirect=True)
def test_a_python_without_arena_ls_gets_one_message_naming_the_cause_and_the_setting(
    session: tuple[CodeServer, Workbench],
) -> None:
    server, bench = session
    toast = wait_for(
        "the start failure message",
        lambda: next((t for t in bench.notifications() if "did not start" in t), None),
        STARTUP_TIMEOUT,
    )
    assert "No module named arena_ls" in toast, toast
    assert "arena.interpreter" in toast, toast
    # The library's own toasts are held back while the server starts: one message for one failure.
    wait_for("the Arena log to record the failure", lambda: "did not start" in server.arena_log())
    errors = [text for text in bench.notifications() if "arena" in text.lower() or "server" in text.lower()]
    assert len(errors) == 1, errors


# -- the reference job on a Ray cluster ----------------------------------------------------

CLUSTER = "lab"
CLUSTER_JOB = "lab-lm"
CLUSTER_JOB_NAME = "Tiny LM on the lab cluster"
CLUSTER_STEPS = 300
CLUSTER_CKPT_EVERY = 20
HEAD_TIMEOUT = 180.0
NO_RAY = 3


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real Ray head on loopback (token auth on), held by ``python -m tests.helpers.rayhead``
    run with the server's interpreter; ended (its jobs stopped first, then exactly its
    processes) when this module's tests are done."""
    has_ray = f"import sys, tests.helpers.rayhead as r; sys.exit(0 if r.ray_installed() else {NO_RAY})"
    probe = subprocess.run(
        [SERVER_PYTHON, "-c", has_ray], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    if probe.returncode == NO_RAY:
        pytest.skip(f"{SERVER_PYTHON} has no ray: pip install 'arena-ls[ray]' (bootstrap.sh, so CI, has it)")
    assert probe.returncode == 0, probe.stderr
    errors = tmp_path_factory.mktemp("rayhead") / "stderr.log"
    with errors.open("wb") as stderr:
        head = subprocess.Popen(
            [SERVER_PYTHON, "-m", "tests.helpers.rayhead"],
            cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
        )  # fmt: skip
    try:
        yield json.loads(_first_line(head, errors))
    finally:
        _end_head(head)


def _first_line(process: subprocess.Popen[str], errors: Path) -> str:
    """The head's address line, once it is ready; fails with its stderr when it is not."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], HEAD_TIMEOUT)
    line = process.stdout.readline() if ready else ""
    if not line:
        raise AssertionError(f"no Ray head within {HEAD_TIMEOUT:.0f}s:\n{errors.read_text()[-3000:]}")
    return line


def _end_head(process: subprocess.Popen[str]) -> None:
    """Closing its stdin ends the head; SIGINT if it hangs (its ``finally`` still ends the head)."""
    assert process.stdin is not None
    with contextlib.suppress(OSError):
        process.stdin.close()
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def make_cluster_workspace(root: Path) -> Path:
    """The bundled workspace whose reference job (``tiny-lm``) gets ``runOn``, as a user would
    write it: small step counts, a stop by signal (a cluster has no stop file: AR111) and its
    checkpoints on storage the cluster shares (an absolute path, inside the workspace (AR110)
    but never shipped with it; the cluster's node is this machine)."""
    workspace = root / "workspace"
    shutil.copytree(REPO / "training", workspace / "training")
    checkpoints = workspace / "checkpoints" / CLUSTER_JOB
    manifest_path = workspace / "training" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    reference = next(job for job in manifest["jobs"] if job["id"] == "tiny-lm")
    args = [
        "training/train.py", "--steps", str(CLUSTER_STEPS), "--ckpt-every", str(CLUSTER_CKPT_EVERY),
        "--log-every", "5", "--eval-every", str(CLUSTER_STEPS), "--batch-size", "4",
        "--sample-chars", "0", "--ckpt-dir", str(checkpoints),
    ]  # fmt: skip
    job = {
        **reference, "id": CLUSTER_JOB, "name": CLUSTER_JOB_NAME, "args": args, "runOn": CLUSTER,
        "status": "approval-required", "stop": {"method": "signal", "graceSeconds": 30},
    }  # fmt: skip
    manifest["clusters"] = {CLUSTER: {"kind": "ray"}}
    manifest["jobs"] = [job]
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return workspace


@pytest.fixture
def cluster_session(
    request: pytest.FixtureRequest, tmp_path: Path, ray_head: dict[str, str]
) -> Iterator[tuple[CodeServer, Workbench]]:
    """code-server whose user settings name the head (``arena.clusters.lab``), as docs/clusters.md says."""
    lab = {"address": ray_head["address"], "tokenFile": ray_head["tokenFile"], "python": SERVER_PYTHON}
    workspace = make_cluster_workspace(tmp_path)
    server = CodeServer(tmp_path, workspace, [SERVER_PYTHON], {"arena.clusters": {CLUSTER: lab}})
    yield from _started(server, request)


def _cluster_step(bench: Workbench) -> int | None:
    """The step the running cluster job's status-bar item shows, if it shows one."""
    for text in bench.status_texts():
        match = re.match(rf"^⟳ {CLUSTER_JOB} @ {CLUSTER} (\d+)/{CLUSTER_STEPS} \(\d+%\)", text)
        if match:
            return int(match.group(1))
    return None


def _run_states(workspace: Path) -> list[dict[str, Any]]:
    """The cluster job's runs, oldest first, as their followers record them (``state.json``)."""
    folders = sorted((workspace / ".aide" / "training" / "runs").glob(f"{CLUSTER_JOB}-*"))
    return [json.loads((folder / "state.json").read_text()) for folder in folders]


def test_the_reference_job_runs_on_a_ray_cluster_with_progress_stop_and_resume(
    cluster_session: tuple[CodeServer, Workbench], ray_head: dict[str, str]
) -> None:
    """The same buttons as locally: approval, progress in the status bar (``lab-lm @ lab``),
    Stop (a checkpoint first: no question), Show Status with the cluster's health, and a
    second run that offers to resume from that checkpoint and runs to the end."""
    server, bench = cluster_session
    bench.status_item(r"^▶ Run$", STARTUP_TIMEOUT)

    run_job(bench, f"▶ {CLUSTER_JOB_NAME}", CLUSTER_JOB)
    bench.answer_dialog(rf"Run {CLUSTER_JOB}\? It needs approval", "Run")
    bench.status_item(rf"^⟳ {CLUSTER_JOB} @ {CLUSTER} \d+/{CLUSTER_STEPS} \(\d+%\)", RUN_TIMEOUT)
    # A step past the first checkpoint: the trainer announces a checkpoint after that step's
    # progress line, so the server has seen it and the stop below asks nothing.
    wait_for(
        "a step past the first checkpoint",
        lambda: (_cluster_step(bench) or 0) > CLUSTER_CKPT_EVERY,
        RUN_TIMEOUT,
    )
    bench.click_status_item("■ Stop")
    stopped = bench.status_item(rf"^■ {CLUSTER_JOB} @ {CLUSTER} stopped (\d+)/{CLUSTER_STEPS}", RUN_TIMEOUT)
    bench.status_item(r"^▶ Run$")
    [first] = _run_states(server.workspace)
    assert first["status"] == "stopped" and first["stoppedBy"] == "signal", (stopped, first)
    step = first["lastCheckpoint"]["step"]
    assert CLUSTER_CKPT_EVERY < step < CLUSTER_STEPS, "the trainer saved where Ray's SIGTERM found it"

    # The status document: the cluster's health (read from Ray) and the stopped run.
    bench.command("Arena: Show Status")
    bench.editor_text(rf"Cluster {CLUSTER}: 1 node, 2 CPUs, 0 GPUs", RUN_TIMEOUT)
    bench.editor_text(rf"■ {CLUSTER_JOB} @ {CLUSTER} stopped")

    # Run again: resume from the checkpoint the stop saved, on the cluster, to the end.
    run_job(bench, f"▶ {CLUSTER_JOB_NAME}", CLUSTER_JOB)
    bench.answer_dialog(rf"has a checkpoint at step {step} of {CLUSTER_STEPS}", f"Resume from step {step}")
    bench.answer_dialog(rf"Run {CLUSTER_JOB}\? It needs approval", "Run")
    bench.editor_text(rf"Active run: ⟳ {CLUSTER_JOB} @ {CLUSTER}", RUN_TIMEOUT)
    bench.status_item(rf"^✓ {CLUSTER_JOB} @ {CLUSTER} succeeded {CLUSTER_STEPS}/{CLUSTER_STEPS}", RUN_TIMEOUT)
    first, second = _run_states(server.workspace)
    assert second["status"] == "succeeded" and second["cluster"]["name"] == CLUSTER, second
    assert second["argv"][-5:] == ["--resume", "--start-step", str(step), "--skip-batches", "0"], second["argv"]
    assert (server.workspace / "checkpoints" / CLUSTER_JOB / "ckpt_latest.pt").exists(), "shared storage"
    # Neither the token nor the address reaches the Arena channel (docs/clusters.md).
    log = server.arena_log()
    assert "Starting the server:" in log and re.search(r"\[info\] arena_ls", log), log[-2000:]
    assert Path(ray_head["tokenFile"]).read_text().strip() not in log, "the cluster's token is in the log"
    assert ray_head["address"] not in log, "the cluster's address is in the log"
