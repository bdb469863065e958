"""An Accelerate loop with the trainer kit's plain functions, as docs/trainer-guide.md shows it.

``accelerator.save_state`` writes the model, optimizer and RNG states to ``step_N``; the kit
announces the folder. Resumed with ``--resume_from {path}``: ``load_state`` and the step of the
folder's name. Each step's batch is a pure function of the step, so a resume draws the batches
an uninterrupted run would have drawn.
"""

import argparse
import os
import time

import torch
from accelerate import Accelerator
from torch import nn

import arena_trainer


def batch_for_step(step: int) -> tuple:
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(16, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True).sin()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--save_every", type=int, default=10)
    parser.add_argument("--output_dir", default="checkpoints")
    parser.add_argument("--resume_from", default=None)
    parser.add_argument("--hold_at", type=int, default=0, help="a fresh run waits at this step for a stop")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    start = 0
    if args.resume_from:
        accelerator.load_state(args.resume_from)
        start = int(os.path.basename(os.path.normpath(args.resume_from)).rsplit("_", 1)[1])
    arena_trainer.should_stop()  # installs the stop handlers before the first step

    def train_step(x, y):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        return loss.item()

    for step in range(start + 1, args.steps + 1):
        x, y = batch_for_step(step)
        loss = arena_trainer.oom_retry(lambda x=x, y=y: train_step(x, y))
        arena_trainer.empty_cache(step)
        arena_trainer.progress(step, args.steps, loss=loss)
        if step == args.hold_at and not args.resume_from:  # for the tests: a long run
            print(f"holding at step {step} until a stop", flush=True)
            while not arena_trainer.should_stop():
                time.sleep(0.02)
        stop = arena_trainer.should_stop()
        if step % args.save_every == 0 or step == args.steps or stop:
            folder = os.path.join(args.output_dir, f"step_{step}")
            accelerator.save_state(folder)
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                arena_trainer.checkpoint(step, folder)
        if stop:
            break


if __name__ == "__main__":
    main()
