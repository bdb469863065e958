#!/usr/bin/env python3
"""Reference trainer for arena-ls: a tiny character-level GPT on a public-domain corpus.

Copy this file as the template for your own trainer. It passes every arena gate
(AR001-AR015) without a single suppression comment, and each place a gate looks
at carries a short comment saying why the gate exists. docs/trainer-guide.md
walks through the rules one by one.

    python training/train.py --steps 600                          # a fresh run
    python training/train.py --steps 600 --resume --start-step 300 # continue it

What the supervisor (the arena job agent) and this script agree on:

* stdout lines ``@arena {"event": "progress", ...}`` and
  ``@arena {"event": "checkpoint", ...}`` announce progress and every save,
  ``@arena {"event": "eval", "step": N, "loss": X}`` each held-out loss;
* the file named by ``ARENA_STOP_FILE`` appearing, or SIGTERM/SIGINT, asks for a
  cooperative stop: save a checkpoint, announce it, exit 0;
* after a crash the agent relaunches with ``--resume --start-step <step of the
  last announced checkpoint>``, and the run continues the same loss curve.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "corpus.txt"
CKPT_LATEST = "ckpt_latest.pt"
CKPT_BEST = "ckpt_best.pt"
TMP_SUFFIX = ".tmp"
VAL_FRACTION = 0.1
EVAL_WINDOWS = 32
EXIT_REFUSED = 2  # bad options, or a resume that does not match the checkpoint

# torch >= 2.5 raises torch.OutOfMemoryError for every device and keeps
# torch.cuda.OutOfMemoryError as an alias; older versions only have the latter.
TORCH_OOM: type[Exception] = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


class RefusedError(Exception):
    """A condition under which the trainer must not start; the message is one line."""


# --------------------------------------------------------------------------- options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    default_dir = Path("checkpoints") / (os.environ.get("ARENA_JOB_ID") or "tiny-lm")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600, help="total optimizer steps")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step")
    p.add_argument(
        "--min-micro-batch",
        type=int,
        default=1,
        help="give up on out-of-memory below this micro-batch",
    )
    p.add_argument("--lr", type=float, default=6e-3, help="peak learning rate")
    p.add_argument("--dropout", type=float, default=0.0)
    # AR005: checkpoint at least every 500 steps, so a crash loses little work.
    p.add_argument("--ckpt-every", type=int, default=100)
    p.add_argument("--ckpt-dir", type=Path, default=default_dir)
    # AR012: evaluation costs time; no more often than every 20 steps.
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--log-every", type=int, default=10)
    # AR007/AR008: the watchdog relaunches a crashed run with
    # `--resume --start-step {step}`; without them a crash restarts from zero.
    p.add_argument("--resume", action="store_true", help="continue from <ckpt-dir>/ckpt_latest.pt")
    p.add_argument(
        "--start-step",
        type=int,
        default=None,
        help="the step the checkpoint must be at (refused if it is not)",
    )
    # Loss-spike rollback (contract 8.2): the supervisor resumes from an earlier checkpoint and
    # asks the trainer to skip the batches that led to the spike.
    p.add_argument("--skip-batches", type=int, default=0, help="on resume, skip this many batches")
    p.add_argument(
        "--keep-checkpoints", type=int, default=3, help="step checkpoints kept (a rollback's choice)"
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a UTF-8 text file")
    p.add_argument(
        "--sample-chars", type=int, default=200, help="characters to generate at the end (0: none)"
    )
    args = p.parse_args(argv)
    problem = option_problem(args)
    if problem:
        p.error(problem)  # exits 2 with the usage line and the message
    return args


def option_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None."""
    if args.steps < 1:
        return "--steps must be at least 1"
    if not 1 <= args.ckpt_every <= 500:
        return "--ckpt-every must be between 1 and 500"
    if args.skip_batches < 0:
        return "--skip-batches must not be negative"
    if args.keep_checkpoints < 1:
        return "--keep-checkpoints must be at least 1"
    if args.eval_every < 20:
        return "--eval-every must be at least 20"
    if not 0.0 <= args.dropout < 1.0:
        return "--dropout must be in [0, 1)"
    if args.log_every < 1:
        return "--log-every must be at least 1"
    if not 1 <= args.min_micro_batch <= args.batch_size:
        return "--min-micro-batch must be between 1 and --batch-size"
    if args.start_step is not None and not args.resume:
        return "--start-step needs --resume"
    if args.start_step is not None and args.start_step < 0:
        return "--start-step must not be negative"
    return None


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise RefusedError("--device cuda, but CUDA is not available")
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Corpus:
    vocab: str  # every character of the text, sorted; a token is an index into it
    train: torch.Tensor  # int64 token ids, the first 90% of the text
    val: torch.Tensor  # the last 10%, held out for evaluation


def load_corpus(path: Path) -> Corpus:
    text = path.read_text(encoding="utf-8")
    vocab = "".join(sorted(set(text)))
    index = {ch: i for i, ch in enumerate(vocab)}
    ids = torch.tensor([index[ch] for ch in text], dtype=torch.long)
    split = int(len(ids) * (1 - VAL_FRACTION))
    return Corpus(vocab=vocab, train=ids[:split], val=ids[split:])


def batch_for_step(
    data: torch.Tensor, seed: int, step: int, batch_size: int, block_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch of `step`: a pure function of (seed, step).

    No iterator state means nothing to save and nothing to fast-forward: a
    resumed run at step s draws exactly the batches an uninterrupted run would
    have drawn. Each row is a contiguous slice of the text (no DataLoader, no
    worker processes; AR010).
    """
    rng = random.Random(f"batch:{seed}:{step}")  # str seeds hash the same in every process
    starts = [rng.randrange(len(data) - block_size - 1) for _ in range(batch_size)]
    x = torch.stack([data[s : s + block_size] for s in starts])
    y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts])
    return x, y


def eval_windows(data: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed, evenly spaced windows over the held-out slice: the same every evaluation."""
    last = len(data) - block_size - 1
    starts = [round(i * last / (EVAL_WINDOWS - 1)) for i in range(EVAL_WINDOWS)]
    x = torch.stack([data[s : s + block_size] for s in starts])
    y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts])
    return x, y


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    block_size: int = 64
    n_layer: int = 3
    n_head: int = 4
    n_embd: int = 96
    dropout: float = 0.0


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.n_embd, 4 * cfg.n_embd),
            nn.GELU(),
            nn.Linear(4 * cfg.n_embd, cfg.n_embd),
            nn.Dropout(cfg.dropout),
        )
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        x = x + self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))
        out: torch.Tensor = x + self.mlp(self.ln2(x))
        return out


def init_weights(module: nn.Module) -> None:
    """Small normal weights (GPT-2 style): the first loss is close to ln(vocab size)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class TinyGPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.Sequential(*(Block(cfg) for _ in range(cfg.n_layer)))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying
        self.apply(init_weights)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        logits: torch.Tensor = self.head(self.ln_f(self.blocks(x)))
        return logits

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def learning_rate(step: int, total: int, peak: float) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak; a pure function of step."""
    warmup = max(1, min(100, total // 10))
    if step <= warmup:
        return peak * step / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * progress)))


# --------------------------------------------------------------------------- one step


def accumulate_gradients(
    model: TinyGPT,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    micro_batch: int,
) -> float:
    """Forward and backward over the batch (x, y); returns its mean loss.

    The batch is cut into micro-batches of `micro_batch` rows whose gradients
    are accumulated, each weighted by its share of the batch, so a smaller
    micro-batch (after an out-of-memory error) gives the same gradient for the
    same data. With one micro-batch the weight is exactly 1.0. The optimizer
    step is not in here: a retry after an out-of-memory error must never apply
    an update twice.
    """
    optimizer.zero_grad(set_to_none=True)
    rows = x.size(0)
    total = torch.zeros((), device=x.device)
    for start in range(0, rows, micro_batch):
        xb, yb = x[start : start + micro_batch], y[start : start + micro_batch]
        weight = xb.size(0) / rows
        loss = model.loss(xb, yb) * weight
        loss.backward()
        total += loss.detach()
    return float(total.item())


def shrink_after_oom(optimizer: torch.optim.Optimizer, micro_batch: int, step: int) -> int:
    """Free what the failed attempt held and return the halved micro-batch."""
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.empty_cache()  # hand the cached blocks back before the smaller retry
    smaller = micro_batch // 2
    print(f"memory retry at step {step}: micro-batch {micro_batch} -> {smaller}", flush=True)
    return smaller


@torch.no_grad()
def evaluate(model: TinyGPT, windows: tuple[torch.Tensor, torch.Tensor]) -> float:
    model.eval()  # no dropout: evaluation draws no random numbers
    loss = model.loss(*windows).item()
    model.train()
    return float(loss)


# --------------------------------------------------------------------------- checkpoints


def rng_states() -> dict[str, Any]:
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_initialized():  # a CPU run on a CUDA machine leaves CUDA alone
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in states and torch.cuda.is_initialized():
        torch.cuda.set_rng_state_all(states["cuda"])


def save_checkpoint(
    path: Path,
    model: TinyGPT,
    optimizer: torch.optim.Optimizer,
    step: int,
    best_val_loss: float,
    vocab: str,
    data_offset: int = 0,
) -> tuple[int, str]:
    """Write a full training state to `path`, atomically; return its size and SHA-256.

    AR006: without the optimizer state a resumed Adam starts from zero moments
    and the loss jumps; without the step the schedule and the data order
    restart. The file is written under a temporary name in the same folder,
    flushed and fsynced, then renamed over the old one: a crash mid-write
    leaves the previous checkpoint intact instead of a truncated file. The size and
    hash are announced with the checkpoint: the supervisor verifies them before it
    resumes from the file (contract 8.2).
    """
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": step,
        "best_val_loss": best_val_loss,
        "rng": rng_states(),
        "config": asdict(model.cfg),
        "vocab": vocab,
        "data_offset": data_offset,
    }
    tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")  # same folder: same disk
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        size, digest = file_digest(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)
    return size, digest


def file_digest(path: Path) -> tuple[int, str]:
    """The file's size and SHA-256 (what a checkpoint announcement carries)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def step_checkpoint(folder: Path, step: int) -> Path:
    """The checkpoint file of one step (the last `--keep-checkpoints` of them are kept)."""
    return folder / f"ckpt_{step:08d}.pt"


def link_latest(folder: Path, saved: Path) -> None:
    """Make ckpt_latest.pt the file just saved: a hard link swapped in atomically (no second
    copy on disk), or a copy where the filesystem has no hard links."""
    tmp = folder / f".{CKPT_LATEST}.{os.getpid()}{TMP_SUFFIX}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    try:
        os.link(saved, tmp)
    except OSError:
        import shutil

        shutil.copyfile(saved, tmp)
    os.replace(tmp, folder / CKPT_LATEST)


def prune_step_checkpoints(folder: Path, keep: int) -> None:
    """Delete all but the newest `keep` step checkpoints (never the one just saved)."""
    saved = sorted(folder.glob("ckpt_[0-9]*.pt"))
    for old in saved[:-keep]:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()


def fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (POSIX; Windows cannot open a folder for this)."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temp_files(folder: Path) -> None:
    """Delete half-written checkpoints left by a run killed in the middle of a save."""
    for stale in sorted(folder.glob(f".*{TMP_SUFFIX}")):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
        print(f"removed stale temporary file {stale.as_posix()}", flush=True)


def load_for_resume(folder: Path, start_step: int | None, vocab: str) -> dict[str, Any]:
    """Load the checkpoint of `start_step` (its step file, else ckpt_latest.pt), refusing
    anything that would not continue this run."""
    path = folder / CKPT_LATEST
    if start_step is not None and step_checkpoint(folder, start_step).is_file():
        path = step_checkpoint(folder, start_step)  # a rollback goes back to an older one
    if not path.is_file():
        raise RefusedError(f"--resume: no checkpoint at {path.as_posix()}")
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    if start_step is not None and state["step"] != start_step:
        raise RefusedError(
            f"--start-step {start_step} does not match {path.as_posix()}, which is at step "
            f"{state['step']}; refusing to resume"
        )
    if state["vocab"] != vocab:
        raise RefusedError(f"{path.as_posix()} was trained on a different corpus")
    return state


# --------------------------------------------------------------------------- output


def announce(event: dict[str, Any]) -> None:
    """One `@arena` line: the supervisor's protocol (contract, section 3)."""
    print("@arena " + json.dumps(event), flush=True)


def announce_progress(step: int, total: int, loss: float, lr: float, rate: float) -> None:
    print(f"step {step}/{total} loss {loss:.4f} lr {lr:.2e} ({rate:.1f} steps/s)", flush=True)
    announce(
        {
            "event": "progress",
            "step": step,
            "total": total,
            "loss": round(loss, 4),
            "lr": round(lr, 8),
        }
    )


def announce_health(step: int, grad_norm: float, clip_fraction: float, grad_param_ratio: float) -> None:
    """The health signals the supervisor watches (contract 6.3): see docs/insights.md."""
    announce(
        {
            "event": "health",
            "step": step,
            "gradNorm": round(grad_norm, 4),
            "clipFraction": round(clip_fraction, 4),
            "gradParamRatio": round(grad_param_ratio, 6),
        }
    )


class GradHealth:
    """Gradient norms over one logging interval: how often clipping cut them, and how big they were.

    `clip_grad_norm_` already returns the norm before clipping, so this costs
    one comparison a step, plus one parameter norm at each progress line.
    """

    def __init__(self, max_norm: float) -> None:
        self.max_norm = max_norm
        self.steps = self.clipped = 0
        self.last_norm = 0.0

    def observe(self, norm: float) -> None:
        self.steps += 1
        self.clipped += norm > self.max_norm
        self.last_norm = norm

    def report(self, step: int, model: nn.Module) -> None:
        with torch.no_grad():
            param_norm = float(torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(p) for p in model.parameters()])))
        ratio = self.last_norm / max(param_norm, 1e-12)
        announce_health(step, self.last_norm, self.clipped / max(self.steps, 1), ratio)
        self.steps = self.clipped = 0


def announce_checkpoint(step: int, path: Path, size: int, digest: str) -> None:
    print(f"saved checkpoint step={step} path={path.as_posix()}", flush=True)
    announce({"event": "checkpoint", "step": step, "path": path.as_posix(), "bytes": size, "sha256": digest})


@torch.no_grad()
def sample(model: TinyGPT, vocab: str, chars: int, seed: int, device: torch.device) -> str:
    """A short generated text, to see what the model has learnt."""
    model.eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    idx = torch.tensor([[max(vocab.find("\n"), 0)]], device=device)
    for _ in range(chars):
        logits = model(idx[:, -model.cfg.block_size :])[:, -1, :]
        nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=gen)
        idx = torch.cat([idx, nxt], dim=1)
    model.train()
    return "".join(vocab[i] for i in idx[0, 1:].tolist())


# --------------------------------------------------------------------------- stopping


class StopRequest:
    """Set by SIGTERM/SIGINT (and SIGBREAK on Windows); checked by the loop every step.

    AR009: the handler only records the request. Saving inside a signal
    handler is unsafe (it can interrupt a save already in progress); the loop
    does the saving at a step boundary.
    """

    def __init__(self) -> None:
        self.signal_number: int | None = None

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.signal_number = signum

    def describe(self) -> str:
        if self.signal_number is None:
            return "stop file"
        return signal.Signals(self.signal_number).name

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self.handle)
        signal.signal(signal.SIGINT, self.handle)
        if sys.platform == "win32":  # the agent's stop signal there is CTRL_BREAK_EVENT
            signal.signal(signal.SIGBREAK, self.handle)


# --------------------------------------------------------------------------- the loop


def build_model(
    args: argparse.Namespace, vocab_size: int, device: torch.device
) -> tuple[TinyGPT, torch.optim.Optimizer]:
    torch.manual_seed(args.seed)  # the initial weights depend on the seed only
    random.seed(args.seed)
    # AR011: plain float32 throughout. Mixed precision is slower, not faster, on
    # GPUs without tensor cores, and its loss scaling is one more source of NaNs.
    model = TinyGPT(ModelConfig(vocab_size=vocab_size, dropout=args.dropout)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    return model, optimizer


def resume_from_checkpoint(
    ckpt_dir: Path,
    start_step: int | None,
    vocab: str,
    model: TinyGPT,
    optimizer: torch.optim.Optimizer,
    skip_batches: int = 0,
) -> tuple[int, float, int]:
    """Restore weights, optimizer moments and RNG states; return (step, best val loss, data offset).

    The data offset moves the batch stream past `skip_batches` more batches (a rollback after a
    loss spike skips the data that led to it); it is saved with every later checkpoint, so a
    relaunch from one of those continues the same stream."""
    state = load_for_resume(ckpt_dir, start_step, vocab)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    restore_rng_states(state["rng"])
    step = int(state["step"])
    offset = int(state.get("data_offset", 0)) + skip_batches
    where = step_checkpoint(ckpt_dir, step)
    where = where if where.is_file() else ckpt_dir / CKPT_LATEST
    print(f"resumed from {where.as_posix()} at step {step}", flush=True)
    if skip_batches:
        print(f"skipping {skip_batches} batches: the data stream continues {offset} batches on", flush=True)
    return step, float(state["best_val_loss"]), offset


def finish(model: TinyGPT, args: argparse.Namespace, vocab: str, summary: str) -> None:
    print(summary, flush=True)
    if args.sample_chars > 0:
        text = sample(model, vocab, args.sample_chars, args.seed, next(model.parameters()).device)
        print("sample: " + text.replace("\n", " / "), flush=True)


def train(args: argparse.Namespace) -> int:
    stop = StopRequest()
    stop.install()  # early, so that a stop asked for during start-up is honoured too
    device = pick_device(args.device)
    corpus = load_corpus(args.data)
    model, optimizer = build_model(args, len(corpus.vocab), device)
    block = model.cfg.block_size
    if len(corpus.val) <= block + 1:
        raise RefusedError(f"{args.data} is too short: its last tenth must exceed {block + 1} chars")
    val_x, val_y = eval_windows(corpus.val, block)
    windows = (val_x.to(device), val_y.to(device))
    ckpt_dir: Path = args.ckpt_dir
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(ckpt_dir)

    start_step, best_val, data_offset = 0, math.inf, 0
    if args.resume:
        start_step, best_val, data_offset = resume_from_checkpoint(
            ckpt_dir, args.start_step, corpus.vocab, model, optimizer, args.skip_batches
        )
    if start_step >= args.steps:
        print(f"nothing to do: the checkpoint is at step {start_step} of {args.steps}", flush=True)
        return 0
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"tiny-lm: {n_params / 1e6:.2f}M parameters on {device}, steps {start_step + 1}.."
        f"{args.steps}, checkpoints in {ckpt_dir.as_posix()}",
        flush=True,
    )

    # AR009: the supervisor asks for a cooperative stop by creating this file.
    stop_file = os.environ.get("ARENA_STOP_FILE")
    micro_batch = args.batch_size  # rows per forward/backward; halved on out-of-memory
    started = last_log_time = time.perf_counter()
    last_log_step = start_step
    # Clipping is a safety net against a rare huge gradient, not a cap on ordinary
    # steps: this model's gradient norm runs 0.5-1.6 after the warm-up, so a limit
    # of 1.0 cut one step in five (the grad-health insight, docs/insights.md).
    grad_health = GradHealth(max_norm=2.0)

    for step in range(start_step + 1, args.steps + 1):  # `step` counts completed steps
        lr = learning_rate(step, args.steps, args.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = batch_for_step(corpus.train, args.seed, step + data_offset, args.batch_size, block)
        x, y = (t.to(device) for t in batch)

        # AR001: an out-of-memory error must not kill a long run. Retry the same
        # step with half the micro-batch (gradients accumulated over the same
        # batch); below the floor, re-raise so the run fails visibly as "oom".
        while True:
            try:
                loss = accumulate_gradients(model, optimizer, x, y, micro_batch)
                break
            except (torch.cuda.OutOfMemoryError, TORCH_OOM):
                if micro_batch // 2 < args.min_micro_batch:
                    raise
            # Outside the handler: the exception and the activations its
            # traceback held are released before the cache is emptied.
            micro_batch = shrink_after_oom(optimizer, micro_batch, step)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_health.max_norm)
        grad_health.observe(float(grad_norm))
        optimizer.step()

        if not math.isfinite(loss):
            print(f"error: loss became {loss} at step {step}", file=sys.stderr, flush=True)
            return 1

        # AR002/AR003: return cached, fragmented blocks to the allocator every 50
        # steps (between 10 and 100): often enough to matter, rarely enough to be cheap.
        if step % 50 == 0 and device.type == "cuda":
            torch.cuda.empty_cache()

        if step % args.log_every == 0 or step == args.steps:
            now = time.perf_counter()
            rate = (step - last_log_step) / max(now - last_log_time, 1e-9)
            announce_progress(step, args.steps, loss, lr, rate)
            grad_health.report(step, model)
            last_log_step, last_log_time = step, now

        # AR012: validation every --eval-every (>= 20) steps, and at the end.
        if step % args.eval_every == 0 or step == args.steps:
            val_loss = evaluate(model, windows)
            print(
                f"eval step={step} val_loss={val_loss:.4f} best={min(val_loss, best_val):.4f}",
                flush=True,
            )
            announce({"event": "eval", "step": step, "loss": round(val_loss, 6)})
            if val_loss < best_val:
                best_val = val_loss
                save_checkpoint(
                    ckpt_dir / CKPT_BEST, model, optimizer, step, best_val, corpus.vocab, data_offset
                )

        # AR009: poll the stop file every step; a signal only set a flag.
        stopping = stop.signal_number is not None or (stop_file is not None and os.path.exists(stop_file))

        # AR004/AR005: checkpoint every --ckpt-every (<= 500) steps, at the end,
        # and before a cooperative stop, so no stop or crash loses much work.
        if step % args.ckpt_every == 0 or step == args.steps or stopping:
            saved = step_checkpoint(ckpt_dir, step)
            size, digest = save_checkpoint(saved, model, optimizer, step, best_val, corpus.vocab, data_offset)
            link_latest(ckpt_dir, saved)
            prune_step_checkpoints(ckpt_dir, args.keep_checkpoints)
            announce_checkpoint(step, saved, size, digest)

        if stopping:
            print(f"stopped by {stop.describe()} at step {step}", flush=True)
            return 0

    elapsed = time.perf_counter() - started
    done = args.steps - start_step
    finish(
        model,
        args,
        corpus.vocab,
        f"done: {done} steps in {elapsed:.1f} s ({done / elapsed:.1f} steps/s), best val_loss {best_val:.4f}",
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return train(args)
    except RefusedError as refusal:
        print(f"error: {refusal}", file=sys.stderr, flush=True)
        return EXIT_REFUSED


if __name__ == "__main__":
    sys.exit(main())
