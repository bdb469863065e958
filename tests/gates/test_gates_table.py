"""Small realistic trainers and the exact set of codes each must produce (fp32_only=True
unless the row says otherwise)."""

from __future__ import annotations

import pytest

from arena_ls.gates import lint_trainer

ARGS = """\
import argparse
import os
import signal

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--resume", action="store_true")
parser.add_argument("--start-step", type=int, default=0)
"""

PLAIN_LOOP = """\
import torch
from model import Net, loader

model = Net().cuda()
optimizer = torch.optim.Adam(model.parameters())
for epoch in range(10):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.cuda()), y.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
torch.save(model.state_dict(), "model.pt")
"""

FUNCTION_WRAPPED_STEP = (
    ARGS
    + """\
args = parser.parse_args()
stop = False
signal.signal(signal.SIGTERM, lambda signum, frame: globals().update(stop=True))
model = torch.nn.Linear(10, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


for step in range(args.start_step, 1000):
    train_step(torch.randn(8, 10, device="cuda"), torch.randn(8, 1, device="cuda"))
    if step % 20 == 0:
        torch.cuda.empty_cache()
    if step % 100 == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, "ckpt.pt")
"""
)

ARGPARSE_DEFAULTS = (
    ARGS
    + """\
from torch.utils.data import DataLoader
from model import Net, dataset, evaluate

parser.add_argument("--save-every", type=int, default=600)
parser.add_argument("--eval-every", type=int, default=10)
parser.add_argument("--num-workers", type=int, default=2)
args = parser.parse_args()
first_step = args.start_step
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters())
loader = DataLoader(dataset, batch_size=8, num_workers=args.num_workers)
for step, (x, y) in enumerate(loader):
    for attempt in range(3):
        try:
            model(x.cuda(), y.cuda()).backward()
            break
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    optimizer.step()
    optimizer.zero_grad()
    if step % 50 == 0:
        torch.cuda.empty_cache()
    if step % args.eval_every == 0:
        evaluate(model)
    if step % args.save_every == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, "ckpt.pt")
    if os.path.exists(os.environ["ARENA_STOP_FILE"]):
        break
"""
)

WHILE_TRUE_COUNTER = (
    ARGS
    + """\
from model import GPT, get_batch

args = parser.parse_args()
model = GPT().cuda()
optimizer = torch.optim.AdamW(model.parameters())
max_iters = 5000
iter_num = args.start_step
while True:
    for attempt in range(3):
        try:
            _, loss = model(*get_batch())
            loss.backward()
            break
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if iter_num % 100 == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "iter_num": iter_num}, "ckpt.pt")
    iter_num += 1
    if iter_num >= max_iters:
        break
"""
)

HF_SAVE_STATE = """\
import argparse
import os

import torch
from accelerate import Accelerator
from model import build_model, train_dataloader

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", default="out")
parser.add_argument("--checkpointing_steps", type=int, default=100)
parser.add_argument("--resume_from_checkpoint", default=None)
parser.add_argument("--start_step", type=int, default=0)
args = parser.parse_args()
first_step = args.start_step
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(build_model(), None, train_dataloader())
completed_steps = 0
for batch in loader:
    outputs = model(**batch)
    accelerator.backward(outputs.loss)
    optimizer.step()
    optimizer.zero_grad()
    completed_steps += 1
    if completed_steps % args.checkpointing_steps == 0:
        accelerator.save_state(os.path.join(args.output_dir, f"step_{completed_steps}"))
"""

LIGHTNING_SAVE_CHECKPOINT = (
    ARGS
    + """\
import lightning as L
from model import LitModel, DataModule

args = parser.parse_args()
trainer = L.Trainer(max_epochs=3)
trainer.fit(LitModel(), datamodule=DataModule())
trainer.save_checkpoint("final.ckpt")
"""
)

FABRIC_SAVE = (
    ARGS
    + """\
from lightning.fabric import Fabric
from model import Net, loader

args = parser.parse_args()
first_step = args.start_step
fabric = Fabric(accelerator="cuda")
model, optimizer = fabric.setup(Net(), torch.optim.Adam(Net().parameters()))
for step, batch in enumerate(fabric.setup_dataloaders(loader)):
    for attempt in range(3):
        try:
            fabric.backward(model(batch))
            break
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    optimizer.step()
    optimizer.zero_grad()
    if step % 50 == 0:
        torch.cuda.empty_cache()
    if step % 200 == 0:
        fabric.save("ckpt.ckpt", {"model": model, "optimizer": optimizer, "step": step})
        print(f"saved checkpoint to ckpt.ckpt at step {step}", flush=True)
    if os.path.exists(os.environ["ARENA_STOP_FILE"]):
        break
"""
)

GRAD_ACCUM_PLUS_ONE = (
    ARGS
    + """\
from model import Net, loader

args = parser.parse_args()
first_step = args.start_step
accum = 8
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step, batch in enumerate(loader):
    loss = model(batch) / accum
    loss.backward()
    if (step + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.empty_cache()
    if (step + 1) % (accum * 100) == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step + 1}, "ckpt.pt")
    if os.path.exists(os.environ["ARENA_STOP_FILE"]):
        break
"""
)

NANOGPT_LIKE = """\
import os
from contextlib import nullcontext

import torch
from model import GPT, GPTConfig

eval_interval = 2000
gradient_accumulation_steps = 40
max_iters = 600000
dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
exec(open("configurator.py").read())
master_process = True
ctx = torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16)
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
model = GPT(GPTConfig()).cuda()
optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95), "cuda")
iter_num = 0


def get_batch(split):
    data = torch.randint(0, 50304, (12, 1025))
    return data[:, :-1].cuda(), data[:, 1:].cuda()


X, Y = get_batch("train")
while True:
    if iter_num % eval_interval == 0 and master_process:
        if iter_num > 0:
            checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                          "iter_num": iter_num}
            torch.save(checkpoint, os.path.join("out", "ckpt.pt"))
    for micro_step in range(gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
        X, Y = get_batch("train")
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    iter_num += 1
    if iter_num > max_iters:
        break
"""

CLASS_SELF_LOSS = (
    ARGS
    + """\
from model import Net, loader


class Trainer:
    def __init__(self):
        self.model = Net().cuda()
        self.opt = torch.optim.Adam(self.model.parameters())
        self.step = 0

    def train_step(self, batch):
        self.loss = self.model(batch)
        self.opt.zero_grad()
        self.loss.backward()
        self.opt.step()

    def save(self):
        torch.save({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
                    "step": self.step}, "ckpt.pt")

    def fit(self, epochs):
        for epoch in range(epochs):
            for batch in loader:
                self.train_step(batch)
                self.step += 1
                if self.step % 100 == 0:
                    self.save()


Trainer().fit(parser.parse_args().start_step)
"""
)

IMPORTED_TRAINER = '''\
"""Entry point: the loop lives in a class imported from another file of the project."""
from mylib.config import load_config
from mylib.training import Trainer

Trainer(load_config("configs/small.yaml")).train()
'''

HF_TRAINER = """\
from transformers import (AutoModelForCausalLM, HfArgumentParser, Trainer,
                          TrainingArguments)

parser = HfArgumentParser(TrainingArguments)
(cli,) = parser.parse_args_into_dataclasses()
training_args = TrainingArguments(output_dir="out", save_steps=1000, fp16=True,
                                  evaluation_strategy="steps", eval_steps=10)
trainer = Trainer(model=AutoModelForCausalLM.from_pretrained("gpt2"), args=training_args)
trainer.train(resume_from_checkpoint=cli.resume_from_checkpoint)
"""

LIGHTNING_FIT = (
    ARGS
    + """\
import pytorch_lightning as pl
from model import LitModel

args = parser.parse_args()
trainer = pl.Trainer(max_epochs=3, precision="16-mixed", val_check_interval=5)
trainer.fit(LitModel())
"""
)

EPOCH_CHECKPOINT = (
    ARGS
    + """\
from model import Net, loader

args = parser.parse_args()
model = Net().cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(args.start_step, 90):
    for i, (x, y) in enumerate(loader):
        for attempt in range(3):
            try:
                torch.nn.functional.cross_entropy(model(x), y).backward()
                break
            except torch.cuda.OutOfMemoryError:
                torch.cuda.empty_cache()
        optimizer.step()
        optimizer.zero_grad()
        if i % 50 == 0:
            torch.cuda.empty_cache()
        if os.path.exists(os.environ["ARENA_STOP_FILE"]):
            raise SystemExit(0)
    torch.save({"epoch": epoch + 1, "state_dict": model.state_dict(),
                "optimizer": optimizer.state_dict()}, "checkpoint.pth.tar")
"""
)

MODEL_FILE_ONLY = """\
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(10, 1)

    def forward(self, x):
        return self.fc(x)
"""

SAFETENSORS_WEIGHTS = (
    ARGS
    + """\
from safetensors.torch import save_file
from model import Net, get_batch

args = parser.parse_args()
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(args.start_step, 3000):
    for attempt in range(3):
        try:
            model(*get_batch()).backward()
            break
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    optimizer.step()
    optimizer.zero_grad()
    if step % 50 == 0:
        torch.cuda.empty_cache()
    if step % 250 == 0:
        save_file(model.state_dict(), "model.safetensors")
    if os.path.exists(os.environ["ARENA_STOP_FILE"]):
        break
"""
)

KEYBOARD_INTERRUPT_MAIN = (
    ARGS
    + """\
from model import Net, get_batch


def train(args):
    model = Net().cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    step = args.start_step
    while True:
        model(*get_batch()).backward()
        optimizer.step()
        optimizer.zero_grad()
        step += 1
        if step % 10 == 0:
            torch.cuda.empty_cache()
        if step % 100 == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "step": step}, "ckpt.pt")
        if step >= 5000:
            break


def main():
    args = parser.parse_args()
    try:
        train(args)
    except KeyboardInterrupt:
        print("interrupted")


if __name__ == "__main__":
    main()
"""
)

COMPACT_GOOD = (
    ARGS
    + """\
from model import Net, get_batch, evaluate

args = parser.parse_args()
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters())
for step in range(args.start_step, 3000):
    for attempt in range(3):
        try:
            model(*get_batch()).backward()
            break
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
    optimizer.step()
    optimizer.zero_grad()
    if step % 50 == 0:
        torch.cuda.empty_cache()
    if step % 200 == 0:
        evaluate(model)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, "ckpt.pt")
        print(f'@arena {{"event": "checkpoint", "step": {step}, "path": "ckpt.pt"}}')
    if os.path.exists(os.environ["ARENA_STOP_FILE"]):
        break
"""
)

EARLY_CONTINUE = (
    ARGS
    + """\
from model import Net, get_batch

args = parser.parse_args()
model = Net().cuda()
optimizer = torch.optim.AdamW(model.parameters())


def maybe_save(step):
    if step % 1000:
        return
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step}, "ckpt.pt")


for step in range(args.start_step, 3000):
    for attempt in range(3):
        try:
            model(*get_batch()).backward()
            break
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()
    optimizer.step()
    optimizer.zero_grad()
    maybe_save(step)
    if os.path.exists(os.environ["ARENA_STOP_FILE"]):
        break
    if step % 25 != 0:
        continue
    torch.cuda.empty_cache()
"""
)

CLASS_BASED_GPT = """\
import argparse
import os
from contextlib import nullcontext

import torch
from model import GPT


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval_interval", default=250, type=int)
    parser.add_argument("--always_save_checkpoint", action="store_true", default=False)
    parser.add_argument("--init_from", default="scratch", choices=["scratch", "resume"])
    parser.add_argument("--max_iters", default=5000, type=int)
    parser.add_argument("--dtype", default="float16", type=str)
    return parser.parse_args()


class Trainer:
    def __init__(self, args):
        self.args = args
        torch.backends.cuda.matmul.allow_tf32 = True
        self.ctx = torch.amp.autocast(device_type="cuda", dtype=torch.float16)
        self.model = GPT().cuda()
        self.scaler = torch.cuda.amp.GradScaler(enabled=(self.args.dtype == "float16"))
        self.optimizer = self.model.configure_optimizers()
        self.iter_num = 0
        self.best_val_loss = 1e9

    def train(self):
        while True:
            if self.iter_num % self.args.eval_interval == 0:
                losses = self.estimate_loss()
                if losses["val"] < self.best_val_loss or self.args.always_save_checkpoint:
                    self.best_val_loss = losses["val"]
                    if self.iter_num > 0:
                        torch.save({"model": self.model.state_dict(),
                                    "optimizer": self.optimizer.state_dict(),
                                    "iter_num": self.iter_num}, "out/ckpt.pt")
            for micro_step in range(4):
                with self.ctx:
                    logits, loss = self.model(*self.get_batch("train"))
                self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.iter_num += 1
            if self.iter_num > self.args.max_iters:
                torch.save({"model": self.model.state_dict(),
                            "optimizer": self.optimizer.state_dict(),
                            "iter_num": self.iter_num}, "out/ckpt.pt")
                break


def main():
    trainer = Trainer(parse_args())
    trainer.train()


if __name__ == "__main__":
    main()
"""

LOOP_LEVEL = {"AR001", "AR002", "AR004", "AR009"}
"""AR015 (checkpoint-atomic) is in most rows below: their saves overwrite one file in place."""

TABLE: list[tuple[str, str, bool | None, set[str]]] = [
    ("plain_loop", PLAIN_LOOP, True, LOOP_LEVEL | {"AR007", "AR008"}),
    ("function_wrapped_step", FUNCTION_WRAPPED_STEP, True, {"AR001", "AR014", "AR015"}),
    ("argparse_defaults", ARGPARSE_DEFAULTS, True, {"AR005", "AR010", "AR012", "AR014", "AR015"}),
    ("while_true_counter", WHILE_TRUE_COUNTER, True, {"AR002", "AR009", "AR014", "AR015"}),
    ("hf_save_state", HF_SAVE_STATE, True, {"AR001", "AR002", "AR009", "AR014"}),
    # Lightning's default checkpoint is saved once per epoch: the cadence is unknown (AR005)
    (
        "lightning_save_checkpoint",
        LIGHTNING_SAVE_CHECKPOINT,
        True,
        {"AR001", "AR002", "AR005", "AR007", "AR008"},
    ),
    ("fabric_save", FABRIC_SAVE, True, {"AR015"}),
    # empty_cache every `accum` = 8 loop steps is below 10; saves every 8 * 100 = 800 steps
    ("grad_accum_plus_one", GRAD_ACCUM_PLUS_ONE, True, {"AR001", "AR003", "AR005", "AR014", "AR015"}),
    (
        "nanogpt_like",
        NANOGPT_LIKE,
        True,
        {"AR001", "AR002", "AR005", "AR007", "AR008", "AR009", "AR011", "AR014", "AR015"},
    ),
    (
        "nanogpt_like_unknown_profile",
        NANOGPT_LIKE,
        None,
        {"AR001", "AR002", "AR005", "AR007", "AR008", "AR009", "AR014", "AR015"},
    ),
    ("class_self_loss", CLASS_SELF_LOSS, True, {"AR001", "AR002", "AR009", "AR014", "AR015"}),
    ("imported_trainer", IMPORTED_TRAINER, True, LOOP_LEVEL | {"AR007", "AR008"}),
    ("hf_trainer", HF_TRAINER, True, {"AR001", "AR002", "AR005", "AR009", "AR011", "AR012"}),
    ("lightning_fit", LIGHTNING_FIT, True, {"AR001", "AR002", "AR005", "AR007", "AR008", "AR011", "AR012"}),
    ("epoch_checkpoint", EPOCH_CHECKPOINT, True, {"AR005", "AR014", "AR015"}),
    ("model_file_only", MODEL_FILE_ONLY, True, LOOP_LEVEL | {"AR007", "AR008"}),
    ("safetensors_weights", SAFETENSORS_WEIGHTS, True, {"AR006", "AR014", "AR015"}),
    ("keyboard_interrupt_main", KEYBOARD_INTERRUPT_MAIN, True, {"AR001", "AR009", "AR014", "AR015"}),
    # `if step % 25 != 0: continue` guards what follows; a helper returns early unless
    # `step % 1000 == 0`
    ("early_continue_and_return", EARLY_CONTINUE, True, {"AR005", "AR014", "AR015"}),
    # the periodic save only runs when validation improves; the other only at the end
    (
        "class_based_gpt",
        CLASS_BASED_GPT,
        True,
        {"AR001", "AR002", "AR005", "AR007", "AR008", "AR009", "AR011", "AR014", "AR015"},
    ),
    ("compact_good", COMPACT_GOOD, True, {"AR015"}),
]


@pytest.mark.parametrize(
    ("source", "fp32_only", "expected"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_trainer_codes(source: str, fp32_only: bool | None, expected: set[str]) -> None:
    found = {finding.code for finding in lint_trainer(source, fp32_only=fp32_only)}
    assert found == expected


def test_table_is_large_enough() -> None:
    assert len({row[1] for row in TABLE}) >= 15


def test_loop_level_findings_sit_on_the_outermost_loop_header() -> None:
    findings = lint_trainer(PLAIN_LOOP, fp32_only=True)
    loop_line = PLAIN_LOOP.splitlines().index("for epoch in range(10):")
    for finding in findings:
        if finding.code in LOOP_LEVEL:
            assert (finding.line, finding.col) == (loop_line, 0)
            assert finding.end_line == loop_line


def test_no_loop_reports_at_line_1() -> None:
    for source in (IMPORTED_TRAINER, MODEL_FILE_ONLY):
        findings = lint_trainer(source, fp32_only=True)
        assert findings and all(finding.line == 0 for finding in findings)
        assert any("no training loop" in finding.message for finding in findings)


@pytest.mark.parametrize("source", [HF_TRAINER, LIGHTNING_FIT])
def test_framework_findings_sit_on_the_framework_call(source: str) -> None:
    findings = lint_trainer(source, fp32_only=True)
    call_line = next(
        i
        for i, text in enumerate(source.splitlines())
        if text.startswith("trainer.train(") or text.startswith("trainer.fit(")
    )
    for code in ("AR001", "AR002"):
        finding = next(f for f in findings if f.code == code)
        assert finding.line == call_line
        assert "the training loop is inside" in finding.message


def test_unknown_save_cadence_is_a_warning_that_says_so() -> None:
    finding = next(f for f in lint_trainer(CLASS_BASED_GPT) if f.code == "AR005")
    assert finding.severity == "warning"
    assert finding.message.startswith("checkpoint cadence unknown: it runs only when `losses")


def test_micro_step_loop_is_not_the_training_loop() -> None:
    findings = lint_trainer(NANOGPT_LIKE, fp32_only=True)
    header = NANOGPT_LIKE.splitlines().index("while True:")
    assert {f.line for f in findings if f.code in ("AR001", "AR002", "AR009")} == {header}
