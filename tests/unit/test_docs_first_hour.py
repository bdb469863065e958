"""What the README and the trainer guide tell a new user agrees with the product (issue 27 items
3 and 8): the rule range, the guide's manifest entry, the README's own job and settings examples,
where `arena plot` writes, how to run `arena`, what the test command installs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from arena_ls.client.cli import build_parser
from arena_ls.gates.registry import RULES
from arena_ls.manifest import load_manifest
from arena_ls.settings import parse_settings

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
GUIDE = (REPO / "docs" / "trainer-guide.md").read_text(encoding="utf-8")
EDITORS = (REPO / "editor-client" / "README.md").read_text(encoding="utf-8")


def json_blocks(text: str) -> list[str]:
    return re.findall(r"```json\n(.*?)```", text, re.DOTALL)


def section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_rule_range_is_the_registrys() -> None:
    """Regression: "AR000–AR012" while AR014 exists and blocks starts."""
    assert max(RULES) == "AR015"
    stale = re.compile(r"AR00[01]\s*[-–]\s*AR012\b")
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "training" / "train.py"]:
        found = stale.findall(path.read_text(encoding="utf-8"))
        assert not found, f"{path.relative_to(REPO)} still says {found}"


def test_the_guides_manifest_entry_is_the_bundled_one() -> None:
    """Regression: the guide's entry said stop `file`/120 while the bundled one uses `both`/60."""
    entry = json.loads(json_blocks(GUIDE.split("### The manifest entry for the reference trainer", 1)[1])[0])
    bundled = json.loads((REPO / "training" / "manifest.json").read_text(encoding="utf-8"))
    assert entry == next(job for job in bundled["jobs"] if job["id"] == "tiny-lm")


def test_the_readmes_own_job_loads_without_an_error(tmp_path: Path) -> None:
    job = json.loads(json_blocks(section(README, "Add your own job"))[0])
    (tmp_path / "training").mkdir()
    shutil.copy(REPO / "training" / "train.py", tmp_path / "training" / "my_train.py")
    manifest = tmp_path / "training" / "manifest.json"
    manifest.write_text(json.dumps({"version": 1, "jobs": [job]}), encoding="utf-8")
    result = load_manifest(manifest, tmp_path)
    assert [d for d in result.diagnostics if d.severity != "information"] == []
    assert list(result.jobs) == [job["id"]]


def test_the_readmes_settings_file_is_read_without_a_warning() -> None:
    terminal = section(README, "The `arena` command after the two commands")
    example = re.search(r"echo '(\{.*?\})' > ", terminal)
    assert example, "ARENA_SETTINGS has an example"
    settings, warnings = parse_settings(json.loads(example.group(1)))
    assert warnings == [] and settings.preflight.min_free_ram_mb == 2048
    assert "ARENA_SETTINGS" in terminal


def test_the_readme_says_how_to_run_arena_and_what_the_tests_install() -> None:
    """Regression: `arena: command not found` after the two commands; 392 MB and apt-get unsaid."""
    terminal = section(README, "The `arena` command after the two commands")
    assert ". .venv/bin/activate" in terminal and ".venv/bin/arena status" in terminal
    installs = README.split("### What `scripts/test.sh` installs", 1)[1].split("\n## ", 1)[0]
    assert "~/.cache/arena-ls-e2e" in installs and "392 MB" in installs
    setup = (REPO / "editor-client" / "vscode" / "e2e" / "setup.sh").read_text(encoding="utf-8")
    packages = re.search(r"DEBIAN_PACKAGES=\((.*?)\)", setup)
    assert packages
    for package in ["neovim", *packages.group(1).split()]:
        assert package in installs, f"the README does not say that the tests may apt-get {package}"


def test_the_editor_readme_installs_from_the_clone() -> None:
    """Regression: `pip install arena-ls` (the package is not published)."""
    install = EDITORS.split("## VS Code", 1)[0]
    assert "pip install -e ." in install and "dist/arena_ls-0.1.0-py3-none-any.whl" in install
    assert not re.search(r"^pip install arena-ls", install, re.MULTILINE)


def test_arena_plot_help_says_where_it_writes(capsys: pytest.CaptureFixture[str]) -> None:
    """Regression: --help said RUN_ID-loss.png; it wrote JOB-loss.png into the workspace root."""
    with pytest.raises(SystemExit):
        build_parser().parse_args(["plot", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ".aide/plots/JOB-loss.png" in text and "RUN_ID" not in text
    assert ".aide/plots/tiny-lm-loss.png" in README


def test_the_first_hour_starts_over_after_the_demo_trained_every_step() -> None:
    """Regression (issue 38): the list began `arena start tiny-lm --follow  # trains` right after
    `demo.sh` had trained all 600 steps, so the first command a new user typed said "finished"."""
    first_hour = (
        README.split("A first hour with the bundled job", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    )
    starts = [
        line.split("#", 1)[0].split() for line in first_hour.splitlines() if line.startswith("arena start")
    ]
    assert starts and "--fresh" in starts[0], starts
    assert all("--fresh" not in words for words in starts[1:]), "only the first start starts over"
