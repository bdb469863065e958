"""The guide's public-trainer tables say what ``tests/gates/public_trainers.json`` says.

The JSON holds each trainer's figures (names and figures, no code); the guide's
style table counts them, and its kit-lines table repeats the lines, how many of
them call the kit, and the job's arguments. Where the repositories' git
snapshots are on this machine (``ARENA_PUBLIC_TRAINER_MIRRORS``: the folder
holding ``owner+name/repo``), the kit edits of ``scripts/public_trainer_kit_edits.py``
are applied again and the figures measured anew.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
LIST = REPO / "tests" / "gates" / "public_trainers.json"
GUIDE = REPO / "docs" / "trainer-guide.md"
SCRIPTS = REPO / "scripts"
MAX_LINES = 6
STYLES = {
    "hf": "Hugging Face Trainer (transformers, trl)",
    "lightning": "Lightning",
    "plain": "plain PyTorch loop",
    "accelerate": "Accelerate",
    "fabric": "Lightning Fabric (litgpt)",
    "flax": "Flax",
}
KIT_ROW_NAMES = {
    ("pytorch/examples", "mnist/main.py"): "pytorch/examples `mnist/main.py`",
    ("pytorch/examples", "imagenet/main.py"): "pytorch/examples `imagenet/main.py`",
    ("pytorch/examples", "word_language_model/main.py"): "pytorch/examples `word_language_model/main.py`",
    ("vwxyzjn/cleanrl", "cleanrl/ppo.py"): "CleanRL `ppo.py`",
    ("huggingface/pytorch-image-models", "train.py"): "timm `train.py`",
    ("karpathy/llm.c", "train_gpt2.py"): "llm.c `train_gpt2.py`",
    ("karpathy/nanoGPT", "train.py"): "nanoGPT `train.py`",
    ("facebookresearch/DiT", "train.py"): "DiT `train.py`",
    ("pytorch/torchtune", "recipes/full_finetune_single_device.py"): (
        "torchtune `full_finetune_single_device.py`"
    ),
    ("pytorch/torchtitan", "torchtitan/train.py"): "torchtitan `train.py`",
    ("huggingface/accelerate", "examples/nlp_example.py"): "Accelerate `nlp_example.py`",
    ("huggingface/accelerate", "examples/complete_nlp_example.py"): "Accelerate `complete_nlp_example.py`",
    ("huggingface/diffusers", "examples/text_to_image/train_text_to_image.py"): (
        "diffusers `train_text_to_image.py`"
    ),
    ("Lightning-AI/litgpt", "litgpt/pretrain.py"): "litgpt `pretrain.py` (Fabric)",
    ("google/flax", "examples/mnist/train.py"): "Flax `mnist/train.py`",
    ("google/flax", "examples/wmt/train.py"): "Flax `wmt/train.py`",
}


def trainers() -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(LIST.read_text(encoding="utf-8"))["trainers"]
    return listed


def guide_table(header: str) -> list[list[str]]:
    """The rows of the guide's table whose header row starts with ``header`` (cells stripped)."""
    lines = GUIDE.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        text = line.strip()
        if not text.startswith("|"):
            break
        rows.append([cell.strip() for cell in text.strip("|").split("|")])
    return rows


def kit_only(item: dict[str, Any]) -> bool:
    """Passes after at most 6 added or changed lines, every one of them a call of the kit."""
    lines = item.get("kit_lines_to_pass")
    return lines is not None and lines <= MAX_LINES and item["kit_call_lines"] == lines


def test_every_trainer_with_kit_figures_says_how_many_lines_call_the_kit() -> None:
    for item in trainers():
        if item["style"] in ("hf", "lightning"):
            assert item["errors_after_quick_fixes"] == [], item["repo"]
            continue
        assert "kit_call_lines" in item and item["kit_lines_note"], item["repo"]
        if "kit_lines_to_pass" in item:
            assert 0 < item["kit_call_lines"] <= item["kit_lines_to_pass"]
            assert "errors_after_kit_lines" not in item
        else:
            assert item["errors_after_kit_lines"], f"{item['repo']} neither passes nor says what is left"
        assert all(isinstance(arg, str) for arg in item.get("kit_job_args", []))


def test_the_style_table_counts_what_the_list_says() -> None:
    rows = {row[0]: row for row in guide_table("| style | trainers |")}
    assert set(rows) == set(STYLES.values())
    listed = trainers()
    for style, name in STYLES.items():
        mine = [item for item in listed if item["style"] == style]
        row = rows[name]
        assert int(row[1]) == len(mine), name
        assert int(re.sub(r"\D.*", "", row[2])) == sum(1 for i in mine if not i["errors_on_main"])
        assert int(row[3].strip("*").split("*")[0].split()[0]) == sum(
            1 for i in mine if not i["errors_after_quick_fixes"]
        ), name
        if style in ("hf", "lightning"):
            assert "quick fixes alone" in row[4]
        else:
            kit_passing = sum(1 for i in mine if kit_only(i))
            assert int(row[4].strip("*").split("*")[0].split()[0]) == kit_passing, name


def test_the_kit_lines_table_repeats_the_lists_figures() -> None:
    rows = {row[0]: row for row in guide_table("| trainer | lines | all kit calls?")}
    by_key = {(item["repo"], item["path"]): item for item in trainers()}
    assert set(rows) == set(KIT_ROW_NAMES.values())
    for key, name in KIT_ROW_NAMES.items():
        item, row = by_key[key], rows[name]
        lines = item.get("kit_lines_to_pass")
        if lines is None:
            assert row[1].startswith("does not pass"), name
            for code in item["errors_after_kit_lines"]:
                assert code in row[1]
        else:
            assert int(row[1].split()[0]) == lines, name
        if lines is not None and item["kit_call_lines"] == lines:
            assert row[2].startswith("yes"), name
        else:
            total = lines if lines is not None else item["kit_call_lines"]
            assert row[2].startswith(f"{item['kit_call_lines']} of {total}"), name
        assert row[3] == " ".join(f"`{a}`" for a in [" ".join(item.get("kit_job_args", []))] if a), name


def test_the_summary_sentence_counts_the_plain_loops() -> None:
    plain = [item for item in trainers() if item["style"] == "plain"]
    passing = sum(1 for item in plain if "kit_lines_to_pass" in item)
    text = " ".join(GUIDE.read_text(encoding="utf-8").split())
    total = len(plain)
    said = f"So all {total}" if passing == total else f"So {passing} of {total}"
    said += " plain loops pass"
    assert said in text
    kit_passing = sum(1 for item in plain if kit_only(item))
    assert f"{kit_passing} of them after at most 6 lines that are all calls of the kit" in text


# --------------------------------------------------------------------------- measured again


def load_script(name: str) -> ModuleType:
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # a dataclass looks its module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


def test_every_kit_edit_belongs_to_a_listed_trainer() -> None:
    edits = load_script("public_trainer_kit_edits").KIT_EDITS
    listed = {(item["repo"], item.get("kit_path") or item["path"]) for item in trainers()}
    assert set(edits) <= listed
    for recipe in edits.values():
        assert recipe.edits and all(old and old != new for old, new in recipe.edits)


@pytest.mark.process  # git show, one a trainer
@pytest.mark.skipif(
    not os.environ.get("ARENA_PUBLIC_TRAINER_MIRRORS"),
    reason="the public trainers' git snapshots are not on this machine (ARENA_PUBLIC_TRAINER_MIRRORS)",
)
def test_the_kit_edits_measure_what_the_list_says() -> None:
    script = load_script("public_trainers")
    mirrors = Path(os.environ["ARENA_PUBLIC_TRAINER_MIRRORS"])
    sys.path.insert(0, str(SCRIPTS))
    try:
        measured = [(item, script.kit_lines(mirrors, item)) for item in trainers()]
    finally:
        sys.path.remove(str(SCRIPTS))
    seen = Counter[str]()
    for item, row in measured:
        if row is None:
            continue
        seen[item["style"]] += 1
        assert "error" not in row, row
        assert row["lines"] == item.get("kit_lines_to_pass", row["lines"]), item["repo"]
        assert row["kit_call_lines"] == item["kit_call_lines"], item["repo"]
        assert row["job_args"] == item.get("kit_job_args", []), item["repo"]
        assert row["errors_after_kit_lines"] == item.get("errors_after_kit_lines", []), item["repo"]
    assert seen == Counter({"plain": 10, "accelerate": 3, "fabric": 1, "flax": 2})
