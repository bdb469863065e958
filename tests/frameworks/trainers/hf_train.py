"""A Hugging Face Trainer run as people write one, plus arena-ls's one added line (the callback).

A tiny GPT-2 built from a configuration (random weights, nothing downloaded) on a tiny in-memory
dataset, on the CPU. Resumed with ``--resume_from_checkpoint {path}``.
"""

import argparse

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", default="out")
    parser.add_argument("--max_steps", type=int, default=40)
    parser.add_argument("--save_steps", type=int, default=10)
    parser.add_argument("--resume_from_checkpoint", default=None)
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
    trainer = Trainer(model=model, args=training, train_dataset=Tokens(), callbacks=[arena_trainer.HFCallback()])
    trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)


if __name__ == "__main__":
    main()
