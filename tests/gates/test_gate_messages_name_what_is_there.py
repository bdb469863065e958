"""Gate messages name what the trainer really has (issue 25's hold-out causes): the CPU count's
module in AR010, the keys of the checkpoint in AR006, torch.accelerator as GPU use."""

from __future__ import annotations

import pytest

from arena_ls.gates import lint_trainer
from tests.gates.support import FIXTURES

LOADER = """import torch
{imports}
from torch.utils.data import DataLoader
workers = {call}
loader = DataLoader([], batch_size=4, num_workers=workers)
"""


@pytest.mark.parametrize(
    ("imports", "call", "named"),
    [
        ("import os", "os.cpu_count()", "os.cpu_count()"),
        ("import multiprocessing", "multiprocessing.cpu_count()", "multiprocessing.cpu_count()"),
        ("import multiprocessing as mp", "max(2, mp.cpu_count())", "multiprocessing.cpu_count()"),
        ("from multiprocessing import cpu_count", "cpu_count()", "multiprocessing.cpu_count()"),
        ("from os import cpu_count", "min(8, cpu_count())", "os.cpu_count()"),
    ],
)
def test_ar010_names_the_cpu_count_the_trainer_calls(imports: str, call: str, named: str) -> None:
    source = LOADER.format(imports=imports, call=call)
    [ar010] = [f for f in lint_trainer(source) if f.code == "AR010"]
    assert f"num_workers from {named}" in ar010.message, ar010.message


def test_ar006_names_the_keys_the_checkpoint_holds() -> None:
    findings = lint_trainer((FIXTURES / "ar006" / "fires_epochs_run_without_optimizer.py").read_bytes())
    [ar006] = [f for f in findings if f.code == "AR006"]
    assert ar006.message.startswith(
        "the saved checkpoint lacks the optimizer state (it holds MODEL_STATE, EPOCHS_RUN"
    )
    assert "the step" not in ar006.message


def test_torch_accelerator_is_gpu_use() -> None:
    findings = lint_trainer(
        (FIXTURES / "ar002" / "fires_torch_accelerator_device.py").read_bytes(), fp32_only=True
    )
    assert [(f.code, f.severity) for f in findings] == [("AR002", "error"), ("AR015", "warning")]
    assert not any("never uses CUDA" in f.message for f in findings)
