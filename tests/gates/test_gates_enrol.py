"""The job "Add this trainer to the manifest" and ``arena init`` write: its resume arguments by
framework, its id, and an insertion into the manifest that keeps every other byte."""

from __future__ import annotations

import json

import pytest

from arena_ls.gates.enrol import (
    ManifestUnusable,
    add_job,
    job_for,
    job_ids,
    listed_as,
    lsp_position,
    unique_id,
)

HF = (
    "from transformers import HfArgumentParser, Trainer, TrainingArguments\n"
    "(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()\n"
    "trainer = Trainer(model=None, args=args)\n"
    "trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)\n"
)
HF_FIRE = (
    "import fire\nimport transformers\n\n\n"
    "def train(base_model: str = '', resume_from_checkpoint: str = None):\n"
    "    trainer = transformers.Trainer(model=None)\n"
    "    trainer.train(resume_from_checkpoint=resume_from_checkpoint)\n\n\n"
    "fire.Fire(train)\n"
)
HF_NO_OPTION = (
    "from transformers import Trainer, TrainingArguments\n"
    "trainer = Trainer(model=None, args=TrainingArguments(output_dir='out'))\ntrainer.train()\n"
)
LIGHTNING_OPTION = (
    "import argparse\nimport lightning as L\nfrom model import Lit\n"
    "parser = argparse.ArgumentParser()\nparser.add_argument('--from-ckpt', dest='ckpt')\n"
    "args = parser.parse_args()\nL.Trainer().fit(Lit(), ckpt_path=args.ckpt)\n"
)
LIGHTNING_SWITCH = (
    "import argparse\nimport lightning as L\nfrom model import Lit\n"
    "parser = argparse.ArgumentParser()\nparser.add_argument('--resume', action='store_true')\n"
    "args = parser.parse_args()\ntrainer = L.Trainer()\n"
    "trainer.fit(Lit(), ckpt_path='last' if args.resume else None)\n"
)
LIGHTNING_CLI = "from lightning.pytorch.cli import LightningCLI\nfrom model import Lit\nLightningCLI(Lit)\n"
PLAIN = "import torch\nfor step in range(10):\n    torch.ones(1).backward()\n"


@pytest.mark.parametrize(
    ("source", "resume", "args"),
    [
        (HF, ["--resume_from_checkpoint", "{path}"], ["t.py"]),
        (HF_FIRE, ["--resume_from_checkpoint", "{path}"], ["t.py"]),
        (HF_NO_OPTION, ["--resume", "--start-step", "{step}"], ["t.py"]),
        (LIGHTNING_OPTION, ["--from-ckpt", "{path}"], ["t.py"]),
        (LIGHTNING_SWITCH, ["--resume"], ["t.py"]),
        (LIGHTNING_CLI, ["--ckpt_path", "{path}"], ["t.py", "fit"]),
        (PLAIN, ["--resume", "--start-step", "{step}"], ["t.py"]),
        ("this is not python(", ["--resume", "--start-step", "{step}"], ["t.py"]),
    ],
    ids=[
        "hf",
        "hf_fire",
        "hf_no_option",
        "lightning_option",
        "lightning_switch",
        "lightning_cli",
        "plain",
        "broken",
    ],
)
def test_the_resume_arguments_follow_the_framework(source: str, resume: list[str], args: list[str]) -> None:
    job = job_for("t.py", source)
    assert job["resume"] == {"args": resume}
    assert job["args"] == args
    assert job["kind"] == "train" and job["script"] == "t.py" and job["command"] == "{python}"


def test_ids_are_valid_and_unique() -> None:
    assert unique_id("Train GPT2 (v2)", set()) == "train-gpt2-v2"
    assert unique_id("train", {"train", "train-2"}) == "train-3"
    assert unique_id("__", set()) == "train"
    assert len(unique_id("x" * 200, set())) <= 64


MANIFESTS = {
    "lf": '{\n  "version": 1,\n  "jobs": [\n    {"id": "a", "args": ["a.py"]}\n  ]\n}\n',
    "crlf": '{\r\n  "version": 1,\r\n  "jobs": [\r\n    {"id": "a", "args": ["a.py"]}\r\n  ]\r\n}\r\n',
    "empty_jobs": '{"version": 1, "jobs": []}',
    "no_jobs": '{\n  "version": 1,\n  "stages": ["x"]\n}\n',
    "empty_object": "{}",
    "unicode": '{\n  "jobs": [\n    {"id": "a", "name": "é模型", "args": ["a.py"]}\n  ]\n}\n',
}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_a_job_is_inserted_and_nothing_else_changes(name: str) -> None:
    text = MANIFESTS[name]
    job = job_for("b.py", PLAIN, job_ids(text))
    insertion = add_job(text, job)
    assert insertion.start == insertion.end or text[insertion.start : insertion.end] in ("[]", "{}")
    after = insertion.apply(text)
    document = json.loads(after)
    assert document["jobs"][-1] == job
    before = json.loads(text)
    before.setdefault("jobs", []).append(job)
    assert document == before, "every other field is as it was"
    if "\r\n" in text:
        assert "\n" not in after.replace("\r\n", ""), "the file's line ends are kept"


@pytest.mark.parametrize(
    "text", ["", "not json", "[1, 2]", '{"jobs": {"a": 1}}', '{"jobs": [1,'], ids=lambda t: t or "empty"
)
def test_a_manifest_it_cannot_extend_is_refused(text: str) -> None:
    with pytest.raises(ManifestUnusable):
        add_job(text, job_for("b.py", PLAIN))


def test_a_script_already_listed_is_found_by_script_or_first_argument() -> None:
    text = json.dumps({"jobs": [{"id": "x", "args": ["-u", "t.py"]}, {"id": "y", "script": "u.py"}]})
    assert listed_as(text, "t.py") == "x"
    assert listed_as(text, "u.py") == "y"
    assert listed_as(text, "v.py") is None
    assert listed_as("not json", "t.py") is None


def test_lsp_positions_count_utf16_units() -> None:
    text = 'é\n"𝔘"x'
    assert lsp_position(text, text.index("x")) == (1, 4)


def test_a_trainer_that_loads_the_checkpoint_an_option_names_resumes_with_its_path() -> None:
    source = (
        "import argparse\nimport torch\nfrom accelerate import Accelerator\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--resume_from')\n"
        "args = parser.parse_args()\n"
        "accelerator = Accelerator()\nif args.resume_from:\n    accelerator.load_state(args.resume_from)\n"
        "for step in range(10):\n    accelerator.backward(torch.ones(1))\n"
    )
    assert job_for("t.py", source)["resume"] == {"args": ["--resume_from", "{path}"]}
