"""The quick fix "Resume from the trainer kit's --resume-path" on a Lightning ``fit`` no option feeds.

Applied, the file parses, ``resume_path()`` runs before anything reads the command line, ``fit``
gets its value, AR007/AR008 are gone, and the job's resume arguments are the kit's option.
Where that order cannot be had, nothing is offered and the finding stays."""

from __future__ import annotations

import ast

import pytest

from arena_ls.gates import lint_trainer
from arena_ls.gates.adopt import CKPT_PATH_FIX_TITLE
from arena_ls.gates.enrol import job_for
from arena_ls.gates.kit_resume import KIT_RESUME_FIX_TITLE
from tests.gates.support import apply_edits

IMPORTS = "from lightning.pytorch.cli import LightningCLI\n\nfrom arena_trainer import LightningCallback\n"
CLI = 'LightningCLI(Lit, run=False, trainer_defaults={"callbacks": [LightningCallback()]})'

CASES = {
    "cli_run_false_in_a_function": (
        IMPORTS + "from model import Lit\n\n\ndef cli_main():\n"
        f"    cli = {CLI}\n"
        "    cli.trainer.fit(cli.model, datamodule=cli.datamodule)\n"
        "    cli.trainer.test(ckpt_path='best', datamodule=cli.datamodule)\n\n\n"
        "if __name__ == '__main__':\n    cli_main()\n",
        "def cli_main():\n    ckpt_path = resume_path()\n    cli = LightningCLI(",
        "cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt_path)",
    ),
    "kit_import_line_joined": (
        IMPORTS + f"\ndef main():\n    cli = {CLI}\n    cli.trainer.fit(cli.model)\n",
        "from arena_trainer import LightningCallback, resume_path\n",
        "cli.trainer.fit(cli.model, ckpt_path=ckpt_path)",
    ),
    "cli_right_after_the_imports": (
        "from lightning.pytorch.cli import LightningCLI\n"
        "from arena_trainer import LightningCallback as LC  # the kit\n"
        'cli = LightningCLI(Lit, run=False, trainer_defaults={"callbacks": [LC()]})\n'
        "cli.trainer.fit(cli.model)\n",
        "from arena_trainer import LightningCallback as LC, resume_path  # the kit\n"
        "ckpt_path = resume_path()\n",
        "cli.trainer.fit(cli.model, ckpt_path=ckpt_path)",
    ),
    "ckpt_path_none_replaced": (
        IMPORTS + f"\ndef main():\n    cli = {CLI}\n    cli.trainer.fit(cli.model, ckpt_path=None)\n",
        "    ckpt_path = resume_path()\n    cli = LightningCLI(",
        "cli.trainer.fit(cli.model, ckpt_path=ckpt_path)",
    ),
    "inside_the_main_guard": (
        IMPORTS + f"\nif __name__ == '__main__':\n    cli = {CLI}\n    cli.trainer.fit(cli.model)\n",
        "if __name__ == '__main__':\n    ckpt_path = resume_path()\n    cli = LightningCLI(",
        "cli.trainer.fit(cli.model, ckpt_path=ckpt_path)",
    ),
    "import_in_parentheses_gets_its_own_line": (
        "from lightning.pytorch.cli import LightningCLI\nfrom arena_trainer import (LightningCallback)\n"
        f"cli = {CLI}\ncli.trainer.fit(cli.model)\n",
        "from arena_trainer import (LightningCallback)\nfrom arena_trainer import resume_path\n"
        "ckpt_path = resume_path()\n",
        "cli.trainer.fit(cli.model, ckpt_path=ckpt_path)",
    ),
    "a_same_file_subclass_of_the_cli": (
        "from lightning.pytorch.cli import LightningCLI\n\nfrom arena_trainer import LightningCallback\n\n\n"
        "class MyCLI(LightningCLI):\n    pass\n\n\ndef main():\n"
        '    cli = MyCLI(Lit, run=False, trainer_defaults={"callbacks": [LightningCallback()]})\n'
        "    cli.trainer.fit(cli.model)\n",
        "    ckpt_path = resume_path()\n    cli = MyCLI(",
        "cli.trainer.fit(cli.model, ckpt_path=ckpt_path)",
    ),
    "the_name_is_taken": (
        IMPORTS + f"\ndef main(ckpt_path='x'):\n    cli = {CLI}\n    cli.trainer.fit(cli.model)\n",
        "    resume_ckpt_path = resume_path()\n    cli = LightningCLI(",
        "cli.trainer.fit(cli.model, ckpt_path=resume_ckpt_path)",
    ),
    "kit_imported_as_a_module": (
        "import arena_trainer\nfrom lightning.pytorch.cli import LightningCLI\n\n\ndef main():\n"
        "    cli = LightningCLI(\n        Lit,\n        run=False,\n"
        '        trainer_defaults={"callbacks": [arena_trainer.LightningCallback()]},\n    )\n'
        "    cli.trainer.fit(cli.model)\n",
        "    ckpt_path = arena_trainer.resume_path()\n    cli = LightningCLI(",
        "cli.trainer.fit(cli.model, ckpt_path=ckpt_path)",
    ),
}


def _fix(source: str, title: str) -> list[object]:
    return [f for f in lint_trainer(source, fp32_only=True) if f.fix_title == title]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kit_resume_fix_hands_fit_the_relaunchs_checkpoint(name: str) -> None:
    source, assigned, handed = CASES[name]
    findings = [f for f in lint_trainer(source, fp32_only=True) if f.fix_title == KIT_RESUME_FIX_TITLE]
    assert {f.code for f in findings} == {"AR007", "AR008"}, name
    assert len({f.edits for f in findings}) == 1, "both findings carry the same fix"
    assert "resume_path()" in findings[0].message
    fixed = apply_edits(source, findings[0].edits)
    ast.parse(fixed)
    assert assigned in fixed
    assert handed in fixed
    cli = "cli = MyCLI(" if "cli = MyCLI(" in fixed else "cli = LightningCLI("
    assert fixed.index("resume_path()") < fixed.index(cli), "before the CLI reads argv"
    after = {f.code for f in lint_trainer(fixed, fp32_only=True) if f.severity == "error"}
    assert not after, f"{name}: still {sorted(after)}"
    assert job_for("t.py", fixed)["resume"]["args"] == ["--resume-path", "{path}"]
    assert job_for("t.py", fixed)["args"] == ["t.py"], "LightningCLI(run=False) has no subcommand"


def test_a_crlf_file_keeps_its_line_ends() -> None:
    source, _, _ = CASES["cli_run_false_in_a_function"]
    source = source.replace("\n", "\r\n")
    (finding, *_) = _fix(source, KIT_RESUME_FIX_TITLE)
    fixed = apply_edits(source, finding.edits)  # type: ignore[attr-defined]
    assert "\n" not in fixed.replace("\r\n", "")
    assert "    ckpt_path = resume_path()\r\n    cli = LightningCLI(" in fixed


def test_an_argparse_option_is_still_preferred_where_it_can_be_added() -> None:
    source = (
        "import argparse\n\nimport lightning as L\n\nfrom model import Lit\n\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--lr')\nargs = parser.parse_args()\n"
        "L.Trainer().fit(Lit())\n"
    )
    assert _fix(source, CKPT_PATH_FIX_TITLE)
    assert not _fix(source, KIT_RESUME_FIX_TITLE)


def test_an_argparse_parse_in_the_same_function_gets_the_kit_line_before_it() -> None:
    """The namespace is not visible to fit (a local of another name): the kit's fix, before the parse."""
    source = (
        "import argparse\n\nimport lightning as L\n\nfrom model import Lit\n\n\ndef main():\n"
        "    parser = argparse.ArgumentParser()\n    parser.add_argument('--lr')\n"
        "    parser.parse_args()\n    L.Trainer().fit(Lit())\n"
    )
    (finding, *_) = _fix(source, KIT_RESUME_FIX_TITLE)
    fixed = apply_edits(source, finding.edits)  # type: ignore[attr-defined]
    assert fixed.index("ckpt_path = resume_path()") < fixed.index("parser.parse_args()")


NO_FIX = {
    "parsed_in_another_function": (
        IMPORTS + f"\ndef build():\n    return {CLI}\n\n\ndef main():\n"
        "    cli = build()\n    cli.trainer.fit(cli.model)\n"
    ),
    "click_parses_before_the_body": (
        "import click\nimport lightning as L\n\nfrom model import Lit\n\n\n@click.command()\n"
        "@click.option('--lr')\ndef main(lr):\n    L.Trainer().fit(Lit())\n"
    ),
    "a_constant_checkpoint_is_the_persons_choice": (
        IMPORTS + f"\ndef main():\n    cli = {CLI}\n    cli.trainer.fit(cli.model, ckpt_path='last')\n"
    ),
    "one_line_compound_statement": (IMPORTS + f"if True: cli = {CLI}; cli.trainer.fit(cli.model)\n"),
}


@pytest.mark.parametrize("name", sorted(NO_FIX))
def test_no_kit_resume_fix_where_the_line_cannot_run_before_the_parse(name: str) -> None:
    source = NO_FIX[name]
    ast.parse(source)
    findings = [f for f in lint_trainer(source, fp32_only=True) if f.code in ("AR007", "AR008")]
    assert findings, f"{name}: AR007/AR008 should still fire"
    assert all(f.fix_title != KIT_RESUME_FIX_TITLE for f in findings)


def test_a_plain_loop_that_loads_what_resume_path_names_is_a_path_resume() -> None:
    source = (
        "import torch\n\nimport arena_trainer\n\nmodel = torch.nn.Linear(2, 2)\n"
        "path = arena_trainer.resume_path()\nif path:\n    model.load_state_dict(torch.load(path))\n"
        "for step in range(10):\n    model(torch.ones(2)).sum().backward()\n"
    )
    codes = {f.code for f in lint_trainer(source, fp32_only=True)}
    assert not codes & {"AR007", "AR008"}
    assert job_for("t.py", source)["resume"]["args"] == ["--resume-path", "{path}"]


def test_resume_path_handed_nowhere_does_not_keep_a_framework_trainers_rule() -> None:
    """A Lightning fit that never gets the path resumes from step 0 whatever the kit read."""
    source = (
        IMPORTS + f"from arena_trainer import resume_path\n\n\ndef main():\n    resume_path()\n"
        f"    cli = {CLI}\n    cli.trainer.fit(cli.model)\n"
    )
    codes = {f.code for f in lint_trainer(source, fp32_only=True)}
    assert {"AR007", "AR008"} <= codes
