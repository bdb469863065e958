"""The quick fix "Add arena-ls's callback": applied, the file parses and the framework
findings it answers (AR001, AR002, AR009) are gone."""

from __future__ import annotations

import ast

import pytest

from arena_ls.gates import lint_trainer
from arena_ls.gates.adopt import FIX_TITLE
from tests.gates.support import apply_edits

HF = """\
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

parser = HfArgumentParser(TrainingArguments)
(training_args,) = parser.parse_args_into_dataclasses()
"""
TRAIN = "trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)\n"

CASES = {
    "hf_no_callbacks": (
        HF + "trainer = Trainer(model=None, args=training_args)\n" + TRAIN,
        "trainer = Trainer(model=None, args=training_args, callbacks=[HFCallback()])",
    ),
    "hf_existing_list": (
        HF + "trainer = Trainer(model=None, args=training_args, callbacks=[Mine()])\n" + TRAIN,
        "callbacks=[Mine(), HFCallback()]",
    ),
    "hf_list_in_a_name": (
        HF + "mine = [Mine()]\ntrainer = Trainer(model=None, args=training_args, callbacks=mine)\n" + TRAIN,
        "callbacks=[*(mine or []), HFCallback()]",
    ),
    "hf_built_elsewhere": (
        HF + "from helpers import make_trainer\n\ntrainer = make_trainer(training_args)\n" + TRAIN,
        "trainer.add_callback(HFCallback())\ntrainer.train(",
    ),
    "hf_one_argument_a_line": (
        HF + "trainer = Trainer(\n    model=None,\n    args=training_args,\n)\n" + TRAIN,
        "    args=training_args,\n    callbacks=[HFCallback()],\n)",
    ),
    "hf_kit_already_imported": (
        HF + "import arena_trainer\n\ntrainer = Trainer(model=None, args=training_args)\n" + TRAIN,
        "callbacks=[arena_trainer.HFCallback()]",
    ),
    "lightning_fit": (
        "import argparse\n\nimport lightning as L\n\nfrom model import Lit\n\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--ckpt_path')\nargs = parser.parse_args()\n"
        "trainer = L.Trainer(max_steps=100)\ntrainer.fit(Lit(), ckpt_path=args.ckpt_path)\n",
        "L.Trainer(max_steps=100, callbacks=[LightningCallback()])",
    ),
    "lightning_cli": (
        "from lightning.pytorch.cli import LightningCLI\n\nfrom model import Lit\n\nLightningCLI(Lit)\n",
        'LightningCLI(Lit, trainer_defaults={"callbacks": [LightningCallback()]})',
    ),
    "lightning_cli_defaults": (
        "from lightning.pytorch.cli import LightningCLI\n\nfrom model import Lit\n\n"
        'LightningCLI(Lit, trainer_defaults={"max_epochs": 3})\n',
        'trainer_defaults={"max_epochs": 3, "callbacks": [LightningCallback()]}',
    ),
}


def _callback_findings(source: str) -> list[object]:
    return [f for f in lint_trainer(source, fp32_only=True) if f.fix_title == FIX_TITLE]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_callback_fix_passes_the_kits_callback_to_the_trainer(name: str) -> None:
    source, expected = CASES[name]
    findings = [f for f in lint_trainer(source, fp32_only=True) if f.fix_title == FIX_TITLE]
    assert findings, f"{name}: no callback fix offered"
    assert {f.code for f in findings} <= {"AR001", "AR002", "AR009"}
    assert len({f.edits for f in findings}) == 1, "every finding carries the same fix"
    fixed = apply_edits(source, findings[0].edits)
    ast.parse(fixed)
    assert expected in fixed
    imported = "import arena_trainer" in source or "from arena_trainer import" in fixed
    assert imported
    after = {f.code for f in lint_trainer(fixed, fp32_only=True) if f.severity != "information"}
    assert not after & {"AR001", "AR002", "AR009"}, f"{name}: still {sorted(after)}"
    assert not _callback_findings(fixed), "no fix is offered once the callback is there"


def test_no_callback_fix_on_a_plain_loop() -> None:
    source = (
        "import torch\n\nmodel = torch.nn.Linear(2, 2).cuda()\n"
        "for step in range(10):\n    model(torch.ones(2, device='cuda')).sum().backward()\n"
    )
    assert not _callback_findings(source)


def test_a_crlf_file_keeps_its_line_ends() -> None:
    source = (HF + "trainer = Trainer(model=None, args=training_args)\n" + TRAIN).replace("\n", "\r\n")
    findings = _callback_findings(source)
    fixed = apply_edits(source, findings[0].edits)
    assert "\n" not in fixed.replace("\r\n", "")
    assert "from arena_trainer import HFCallback\r\n" in fixed


RESUME_CASES = {
    "hf_train_without_resume": (
        HF + "trainer = Trainer(model=None, args=training_args)\ntrainer.train()\n",
        "Resume from --resume_from_checkpoint",
        "trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint)",
    ),
    "hf_train_resume_none": (
        HF
        + "trainer = Trainer(model=None, args=training_args)\ntrainer.train(resume_from_checkpoint=None)\n",
        "Resume from --resume_from_checkpoint",
        "trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint)",
    ),
    "lightning_fit_in_main": (
        "from argparse import ArgumentParser\n\nimport lightning as L\n\nfrom model import Lit\n\n\n"
        "def main(args):\n    trainer = L.Trainer()\n    trainer.fit(Lit(), None)\n\n\n"
        "if __name__ == '__main__':\n    parser = ArgumentParser()\n"
        "    parser.add_argument('--lr', type=float, default=0.1)\n"
        "    args = parser.parse_args()\n    main(args)\n",
        "Resume from --ckpt_path",
        "trainer.fit(Lit(), None, ckpt_path=args.ckpt_path)",
    ),
}


@pytest.mark.parametrize("name", sorted(RESUME_CASES))
def test_the_resume_fix_hands_the_option_to_the_framework(name: str) -> None:
    source, title, expected = RESUME_CASES[name]
    findings = [f for f in lint_trainer(source, fp32_only=True) if f.fix_title == title]
    assert {f.code for f in findings} == {"AR007", "AR008"}
    fixed = apply_edits(source, findings[0].edits)
    ast.parse(fixed)
    assert expected in fixed
    after = {f.code for f in lint_trainer(fixed, fp32_only=True)}
    assert not after & {"AR007", "AR008"}, f"{name}: still {sorted(after)}"


def test_no_resume_fix_without_an_option_the_command_line_can_give() -> None:
    source = (
        "from transformers import Trainer, TrainingArguments\n"
        "trainer = Trainer(model=None, args=TrainingArguments(output_dir='out'))\ntrainer.train()\n"
    )
    findings = [f for f in lint_trainer(source, fp32_only=True) if f.code in ("AR007", "AR008")]
    assert findings and all(not f.edits for f in findings)
    assert "ignores --resume_from_checkpoint" in findings[0].message
