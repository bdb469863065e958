"""How long ``lint_trainer`` takes on a 10,000-line trainer, next to ``ast.parse``.

    python benchmarks/bench_lint.py [--quick]

The trainer is generated: a realistic header (imports, argparse, a config
dataclass), many model, data and utility blocks of the kind real training
scripts carry, and one training loop with gradient accumulation, evaluation,
checkpointing and a stop-file poll. Each figure is the median of several
runs (``*_best_ms``: the fastest); the parse baseline is measured the same way,
in the same process. ``lint_trainer`` pauses the garbage collector while it
parses and analyses (the AST holds no cycles), so the baseline is given both
as a plain ``ast.parse`` and with the collector paused; ``analysis_ms`` is
what the rules add on top of the paused parse. ``cpu_ratio`` compares process
CPU time instead of wall time, which a busy shared machine disturbs less.

``check_empty_ms`` is the start-up of ``arena check`` itself: the ``arena``
entry point (``python -m arena_ls.client.entry check empty.py``) run on an
empty file in a fresh interpreter, with bytecode already compiled (as after
any install), median of several runs; ``python_startup_ms`` is a bare
``python -c pass`` measured the same way, and ``check_empty_cpu_ms`` the
child's CPU time (user + system), which a busy machine disturbs less.
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arena_ls.gates import lint_trainer

TARGET_LINES = 10_000
TARGET_RATIO = 3.0
TARGET_MS = 100.0
TARGET_CHECK_EMPTY_MS = 100.0
_REPO = Path(__file__).resolve().parents[1]

_HEADER = '''\
"""A generated trainer for the lint benchmark."""
import argparse
import math
import os
import signal
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser(description="benchmark trainer")
parser.add_argument("--data-dir", default="data")
parser.add_argument("--out-dir", default="checkpoints")
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--lr", type=float, default=3e-4)
parser.add_argument("--max-steps", type=int, default=2000)
parser.add_argument("--accum", type=int, default=4)
parser.add_argument("--ckpt-every", type=int, default=200)
parser.add_argument("--eval-every", type=int, default=250)
parser.add_argument("--num-workers", type=int, default=0)
parser.add_argument("--resume", action="store_true")
parser.add_argument("--start-step", type=int, default=0)


@dataclass
class TrainConfig:
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 4
    vocab_size: int = 8192
    block_size: int = 256
    dropout: float = 0.1
    weight_decay: float = 0.1
    betas: tuple = field(default_factory=lambda: (0.9, 0.95))
'''

_BLOCK = '''

class Attention{i}(nn.Module):
    """Multi-head self-attention, variant {i}."""

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.dropout = nn.Dropout(cfg.dropout)
        mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
        self.register_buffer("mask", mask.view(1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)
        k = k.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)
        v = v.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = self.dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Block{i}(nn.Module):
    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention{i}(cfg)
        self.ln2 = nn.LayerNorm(cfg.dim)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.dim, 4 * cfg.dim),
            nn.GELU(),
            nn.Linear(4 * cfg.dim, cfg.dim),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TokenDataset{i}(Dataset):
    def __init__(self, path: str, block_size: int) -> None:
        self.block_size = block_size
        self.tokens = torch.load(path) if os.path.exists(path) else torch.zeros(4096).long()

    def __len__(self) -> int:
        return max(0, len(self.tokens) - self.block_size - 1)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        chunk = self.tokens[index : index + self.block_size + 1]
        return chunk[:-1], chunk[1:]


def cosine_lr_{i}(step: int, warmup: int, total: int, base: float) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.1 * base + 0.9 * base * 0.5 * (1.0 + math.cos(math.pi * progress))


def format_metrics_{i}(metrics: dict[str, float]) -> str:
    parts = []
    for key, value in sorted(metrics.items()):
        if isinstance(value, float):
            parts.append(f"{{key}}={{value:.4f}}")
        else:
            parts.append(f"{{key}}={{value}}")
    return " ".join(parts)
'''

_MAIN = """

def save_checkpoint(model, optimizer, step, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step}, str(path) + ".tmp")
    os.replace(str(path) + ".tmp", path)
    print(f"saved checkpoint step={step} path={path}", flush=True)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    total = 0.0
    for x, y in loader:
        logits = model(x.cuda())
        total += F.cross_entropy(logits.view(-1, logits.size(-1)), y.cuda().view(-1)).item()
    model.train()
    return total / max(1, len(loader))


def main():
    args = parser.parse_args()
    cfg = TrainConfig()
    model = nn.Sequential(*[Block0(cfg) for _ in range(cfg.n_layers)]).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    train_loader = DataLoader(TokenDataset0(args.data_dir, cfg.block_size),
                              batch_size=args.batch_size, num_workers=args.num_workers)
    val_loader = DataLoader(TokenDataset0(args.data_dir, cfg.block_size), batch_size=8)
    stop_file = os.environ.get("ARENA_STOP_FILE", "STOP")
    step = args.start_step
    data = iter(train_loader)
    while step < args.max_steps:
        for attempt in range(3):
            try:
                for micro in range(args.accum):
                    try:
                        x, y = next(data)
                    except StopIteration:
                        data = iter(train_loader)
                        x, y = next(data)
                    logits = model(x.cuda())
                    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.cuda().view(-1))
                    (loss / args.accum).backward()
                break
            except torch.cuda.OutOfMemoryError:
                optimizer.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr_0(step, 100, args.max_steps, args.lr)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        if step % 50 == 0:
            torch.cuda.empty_cache()
        if step % args.eval_every == 0:
            print(f"step {step} val {evaluate(model, val_loader):.4f}")
        if step % args.ckpt_every == 0:
            save_checkpoint(model, optimizer, step, os.path.join(args.out_dir, "ckpt.pt"))
        if os.path.exists(stop_file):
            save_checkpoint(model, optimizer, step, os.path.join(args.out_dir, "ckpt.pt"))
            break


if __name__ == "__main__":
    main()
"""


def generate_trainer(lines: int = TARGET_LINES) -> str:
    """A realistic trainer of about ``lines`` lines (at least)."""
    parts = [_HEADER]
    count = _HEADER.count("\n") + _MAIN.count("\n")
    index = 0
    while count < lines:
        block = _BLOCK.format(i=index)
        parts.append(block)
        count += block.count("\n")
        index += 1
    parts.append(_MAIN)
    return "".join(parts)


def _samples_ms(
    function: Callable[[], object], repeats: int, clock: Callable[[], float] = time.perf_counter
) -> list[float]:
    samples = []
    for _ in range(repeats):
        gc.collect()
        start = clock()
        function()
        samples.append((clock() - start) * 1000)
    return samples


def _parse_without_gc(text: str) -> ast.Module:
    gc.disable()
    try:
        return ast.parse(text)
    finally:
        gc.enable()


def run(quick: bool = False) -> dict[str, float | int | bool]:
    """Measure and return the figures (milliseconds; medians of ``repeats`` runs)."""
    text = generate_trainer(1_000 if quick else TARGET_LINES)
    repeats = 3 if quick else 9
    findings = lint_trainer(text)
    lint = _samples_ms(lambda: lint_trainer(text), repeats)
    parse = _samples_ms(lambda: ast.parse(text), repeats)
    parse_no_gc = _samples_ms(lambda: _parse_without_gc(text), repeats)
    lint_cpu = _samples_ms(lambda: lint_trainer(text), repeats, time.process_time)
    parse_cpu = _samples_ms(lambda: ast.parse(text), repeats, time.process_time)
    lint_ms, parse_ms = statistics.median(lint), statistics.median(parse)
    parse_no_gc_ms = statistics.median(parse_no_gc)
    ratio = lint_ms / parse_ms if parse_ms else float("inf")
    cpu_ratio = statistics.median(lint_cpu) / max(statistics.median(parse_cpu), 1e-9)
    return {
        "lines": text.count("\n") + 1,
        "repeats": repeats,
        "findings": len(findings),
        "lint_ms": round(lint_ms, 2),
        "lint_best_ms": round(min(lint), 2),
        "ast_parse_ms": round(parse_ms, 2),
        "ast_parse_best_ms": round(min(parse), 2),
        "ast_parse_no_gc_ms": round(parse_no_gc_ms, 2),
        "ratio": round(ratio, 3),
        "ratio_vs_parse_no_gc": round(lint_ms / parse_no_gc_ms, 3) if parse_no_gc_ms else 0.0,
        "cpu_ratio": round(cpu_ratio, 3),
        "analysis_ms": round(lint_ms - parse_no_gc_ms, 2),
        "meets_ratio": ratio <= TARGET_RATIO,
        "meets_100ms": lint_ms < TARGET_MS,
        **check_startup(3 if quick else 9),
    }


def _child_ms(argv: list[str], cwd: str, repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU milliseconds of ``repeats`` runs of a child process (after one warm-up)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(_REPO)
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)  # compiles .pyc
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
        walls.append((time.perf_counter() - start) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)
    return walls, cpus


def check_startup(repeats: int) -> dict[str, float | bool]:
    """``arena check empty.py`` in a fresh interpreter, next to a bare interpreter start."""
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "empty.py").write_text("")
        check, check_cpu = _child_ms(
            [sys.executable, "-m", "arena_ls.client.entry", "check", "empty.py"], folder, repeats
        )
        bare, bare_cpu = _child_ms([sys.executable, "-c", "pass"], folder, repeats)
    check_ms = statistics.median(check)
    return {
        "check_empty_ms": round(check_ms, 1),
        "check_empty_best_ms": round(min(check), 1),
        "check_empty_cpu_ms": round(statistics.median(check_cpu), 1),
        "python_startup_ms": round(statistics.median(bare), 1),
        "python_startup_cpu_ms": round(statistics.median(bare_cpu), 1),
        "meets_check_empty_100ms": check_ms < TARGET_CHECK_EMPTY_MS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 lines, 3 repeats")
    args = parser.parse_args(argv)
    figures = run(quick=args.quick)
    width = max(len(key) for key in figures)
    for key, value in figures.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
