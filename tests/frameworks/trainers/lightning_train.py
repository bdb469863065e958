"""A Lightning trainer run as people write one, plus arena-ls's one added line (the callback).

A small regression module on fixed in-memory data, on the CPU; ModelCheckpoint saves every
``--every`` steps (one epoch: the data are in a fixed order, so a resume at an epoch's end
continues the same curve). Resumed with ``--ckpt_path {path}``.
"""

import argparse
import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import arena_trainer


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class HoldAt(pl.Callback):
    """For the tests: a long run, stood for by a wait at one step until a stop is asked."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            print(f"holding at step {self.step} until a stop", flush=True)
            while not arena_trainer.should_stop():
                time.sleep(0.02)


def data(batches: int) -> DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batches * 4, 8, generator=generator)
    y = x.sum(dim=1, keepdim=True).sin()
    return DataLoader(TensorDataset(x, y), batch_size=4, shuffle=False, num_workers=0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--dirpath", default="checkpoints")
    parser.add_argument("--ckpt_path", default=None)
    parser.add_argument("--hold_at", type=int, default=0, help="a fresh run waits at this step for a stop")
    args = parser.parse_args()
    pl.seed_everything(0, verbose=False)
    saver = ModelCheckpoint(dirpath=args.dirpath, every_n_train_steps=args.every, save_top_k=-1)
    holds = [HoldAt(args.hold_at)] if args.hold_at and not args.ckpt_path else []
    trainer = pl.Trainer(
        max_steps=args.max_steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        callbacks=[saver, *holds, arena_trainer.LightningCallback()],
    )
    trainer.fit(Regression(), data(args.every), ckpt_path=args.ckpt_path)


if __name__ == "__main__":
    main()
