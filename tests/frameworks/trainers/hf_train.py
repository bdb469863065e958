"""A Hugging Face Trainer run as people write one, plus arena-ls's one added line (the callback).

A tiny GPT-2 built from a configuration (random weights, nothing downloaded) on a tiny in-memory
dataset, on the CPU. Resumed with ``--resume_from_checkpoint {path}``.
"""

import argparse
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

import arena_trainer


class Tokens(torch.utils.data.Dataset):
    """64 fixed random sequences: the same data in every process."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (64, 16), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class HoldAt(TrainerCallback):
    """For the tests: a long run, stood for by a wait at one step until a stop is asked."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            print(f"holding at step {self.step} until a stop", flush=True)
            while not arena_trainer.should_stop():
                time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default="out")
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--save_steps", type=int, default=10)
    parser.add_argument("--resume_from_checkpoint", default=None)
    parser.add_argument("--hold_at", type=int, default=0, help="a fresh run waits at this step for a stop")
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        save_steps=args.save_steps,
        logging_steps=1,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    holds = [HoldAt(args.hold_at)] if args.hold_at and not args.resume_from_checkpoint else []
    callbacks = [*holds, arena_trainer.HFCallback()]
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(), callbacks=callbacks)
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)


if __name__ == "__main__":
    main()
