# ruff: noqa: E501 (each edit is one exact excerpt of an upstream line)
"""The kit-call edits that make each public trainer pass the gates, as data (issue 35).

``python scripts/public_trainers.py --mirrors DIR --kit`` applies them to each
trainer read from its git snapshot, counts the lines added or changed (as
``difflib`` sees them), says which of those lines call the kit, and lints the
result as the job runs it (``job_args``: the arguments after the script, which
the cadence rules read). Each edit replaces one exact excerpt of the upstream
file (a few of its lines, quoted only to say where the kit's call goes) and
must match exactly once. ``tests/gates/public_trainers.json`` holds the
figures; ``docs/trainer-guide.md`` the tables.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class KitEdits:
    job_args: tuple[str, ...]
    edits: tuple[tuple[str, str], ...]


KIT_EDITS: dict[tuple[str, str], KitEdits] = {
    ("karpathy/nanoGPT", "train.py"): KitEdits(
        job_args=("--eval_interval=500",),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "init_from = 'scratch' # 'scratch' or 'resume' or 'gpt2*'",
                "init_from = 'resume' if arena.resume_path() else 'scratch' # 'scratch' or 'resume' or 'gpt2*'",
            ),
            ("        scaler.scale(loss).backward()", "        arena.oom_retry(scaler.scale(loss).backward)"),
            ("    iter_num += 1\n", "    arena.empty_cache(iter_num)\n    iter_num += 1\n"),
            (
                "torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))",
                "arena.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'), iter_num)",
            ),
        ),
    ),
    ("karpathy/llm.c", "train_gpt2.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "    for step in range(args.num_iterations + 1):",
                "    for step in range(arena.resume_step() or 0, args.num_iterations + 1):",
            ),
            (
                "                loss.backward()\n        if ddp:",
                "                arena.oom_retry(loss.backward)\n        if ddp:",
            ),
            (
                "        optimizer.step()\n        # --------------- TRAINING SECTION END",
                "        optimizer.step()\n        arena.empty_cache(step)\n        arena.save({'model': raw_model.state_dict(), 'optimizer': optimizer.state_dict(), 'step': step + 1}, 'ckpt.pt', step + 1, every=200)\n        # --------------- TRAINING SECTION END",
            ),
        ),
    ),
    ("pytorch/examples", "mnist/main.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "        optimizer.step()\n        if batch_idx % args.log_interval == 0:",
                "        optimizer.step()\n        arena.empty_cache(batch_idx)\n        if batch_idx % args.log_interval == 0:",
            ),
            (
                "    for epoch in range(1, args.epochs + 1):\n        train(args, model, device, train_loader, optimizer, epoch)",
                "    for epoch in range((arena.resume_step() or 0) + 1, args.epochs + 1):\n        arena.oom_retry(lambda: train(args, model, device, train_loader, optimizer, epoch))",
            ),
            (
                "        scheduler.step()\n",
                "        scheduler.step()\n        arena.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'scheduler': scheduler.state_dict(), 'step': epoch}, 'mnist_ckpt.pt', epoch)\n",
            ),
        ),
    ),
    ("pytorch/examples", "imagenet/main.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "        train(train_loader, model, criterion, optimizer, epoch, device, args)\n",
                "        arena.oom_retry(lambda: train(train_loader, model, criterion, optimizer, epoch, device, args))\n",
            ),
            (
                "        loss.backward()\n        optimizer.step()\n",
                "        loss.backward()\n        optimizer.step()\n        arena.empty_cache(i)\n",
            ),
            (
                "    torch.save(state, filename)\n",
                "    torch.save(state, filename)\n    arena.checkpoint(state['epoch'], filename)\n",
            ),
        ),
    ),
    ("pytorch/examples", "word_language_model/main.py"): KitEdits(
        job_args=("--use-optimizer",),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "        loss = criterion(output, targets)\n        loss.backward()\n",
                "        loss = criterion(output, targets)\n        arena.oom_retry(loss.backward)\n        arena.empty_cache(batch)\n",
            ),
            (
                "    for epoch in range(1, args.epochs+1):\n",
                "    for epoch in range((arena.resume_step() or 0) + 1, args.epochs+1):\n",
            ),
            (
                "        val_loss = evaluate(val_data)\n        print('-' * 89)\n",
                "        val_loss = evaluate(val_data)\n        arena.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'lr': lr, 'step': epoch}, 'ckpt.pt', epoch)\n        print('-' * 89)\n",
            ),
        ),
    ),
    ("vwxyzjn/cleanrl", "cleanrl/ppo.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "    for iteration in range(1, args.num_iterations + 1):\n",
                "    for iteration in range((arena.resume_step() or 0) + 1, args.num_iterations + 1):\n",
            ),
            (
                "                loss.backward()\n                nn.utils",
                "                arena.oom_retry(loss.backward)\n                nn.utils",
            ),
            (
                "        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()\n",
                "        arena.empty_cache(iteration)\n        arena.save({'agent': agent.state_dict(), 'optimizer': optimizer.state_dict(), 'step': iteration}, 'ckpt.pt', iteration, every=10)\n        y_pred, y_true = b_values.cpu().numpy(), b_returns.cpu().numpy()\n",
            ),
        ),
    ),
    ("huggingface/pytorch-image-models", "train.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "                _loss.backward(create_graph=second_order)\n",
                "                arena.oom_retry(lambda: _loss.backward(create_graph=second_order))\n",
            ),
            (
                "        num_updates += 1\n        optimizer.zero_grad()\n",
                "        num_updates += 1\n        arena.empty_cache(num_updates)\n        optimizer.zero_grad()\n",
            ),
            (
                "                best_metric, best_epoch = saver.save_checkpoint(epoch, metric=latest_metric)\n",
                "                best_metric, best_epoch = saver.save_checkpoint(epoch, metric=latest_metric)\n                arena.checkpoint(epoch, os.path.join(output_dir, 'last.pth.tar'))\n",
            ),
        ),
    ),
    ("facebookresearch/DiT", "train.py"): KitEdits(
        job_args=("--ckpt-every", "500"),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            ("    train_steps = 0\n", "    train_steps = arena.resume_step() or 0\n"),
            (
                "            loss.backward()\n            opt.step()\n",
                "            arena.oom_retry(loss.backward)\n            opt.step()\n",
            ),
            (
                "            train_steps += 1\n",
                "            train_steps += 1\n            arena.empty_cache(train_steps)\n",
            ),
            (
                "                    torch.save(checkpoint, checkpoint_path)\n",
                "                    arena.save(checkpoint, checkpoint_path, train_steps)\n",
            ),
        ),
    ),
    ("pytorch/torchtitan", "torchtitan/trainer.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "from torchtitan.tools.profiler import Profiler\n",
                "from torchtitan.tools.profiler import Profiler\narena.resume_path()  # takes --resume-path off sys.argv before torchtitan's parser reads it\n",
            ),
            (
                "        self.checkpointer.load(step=config.checkpoint.load_step)\n",
                "        self.checkpointer.load(step=int(arena.resume_path().rstrip('/').rsplit('step-', 1)[1]) if arena.resume_path() else config.checkpoint.load_step)\n",
            ),
            (
                "                        self.train_step(data_iterator)\n",
                "                        arena.oom_retry(lambda: self.train_step(data_iterator))\n",
            ),
            (
                "                    self.checkpointer.save(\n                        self.step,\n                        last_step=(self.step == config.training.steps),\n                    )\n",
                "                    arena.empty_cache(self.step)\n                    self.checkpointer.save(\n                        self.step,\n                        last_step=(self.step == config.training.steps),\n                    )\n                    arena.checkpoint(self.step, os.path.join(config.dump_folder, config.checkpoint.folder, f'step-{self.step}'), only_if_written=True)\n",
            ),
        ),
    ),
    ("pytorch/torchtune", "recipes/full_finetune_single_device.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "from torchtune import config, modules, training, utils\n",
                "from torchtune import config, modules, training, utils\narena.resume_path()  # takes --resume-path off sys.argv before @config.parse reads it\n",
            ),
            (
                "        self._resume_from_checkpoint = cfg.resume_from_checkpoint\n",
                "        self._resume_from_checkpoint = cfg.resume_from_checkpoint or bool(arena.resume_path())\n",
            ),
            (
                "                current_loss.backward()\n",
                "                arena.oom_retry(current_loss.backward)\n",
            ),
            (
                "                    self.global_step += 1\n",
                "                    self.global_step += 1\n                    arena.empty_cache(self.global_step)\n",
            ),
            (
                "            dir_prefix=self.checkpoint_dir_prefix,\n        )\n",
                "            dir_prefix=self.checkpoint_dir_prefix,\n        )\n        arena.checkpoint(step, f'{self._output_dir}/{self.checkpoint_dir_prefix}_{epoch if self.checkpoint_dir_prefix == \"epoch\" else step}')\n",
            ),
        ),
    ),
    ("Lightning-AI/litgpt", "litgpt/pretrain.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "from litgpt import Tokenizer\n",
                "from litgpt import Tokenizer\narena.resume_path()  # takes --resume-path off sys.argv before litgpt's CLI reads it\n",
            ),
            (
                "    resume = find_resume_path(resume, out_dir)\n",
                "    resume = arena.resume_path() or find_resume_path(resume, out_dir)\n",
            ),
            (
                "            fabric.backward(loss / train.gradient_accumulation_iters(devices, num_nodes))\n",
                "            arena.oom_retry(lambda: fabric.backward(loss / train.gradient_accumulation_iters(devices, num_nodes)))\n",
            ),
            (
                '        state["iter_num"] += 1\n        iter_t0',
                '        state["iter_num"] += 1\n        arena.empty_cache(state["iter_num"])\n        iter_t0',
            ),
            (
                "    fabric.save(checkpoint_file, state)\n",
                '    fabric.save(checkpoint_file, state)\n    arena.checkpoint(state["step_count"], checkpoint_file)\n',
            ),
        ),
    ),
    ("huggingface/accelerate", "examples/nlp_example.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "    for epoch in range(num_epochs):\n        model.train()\n",
                "    for epoch in range(arena.resume_step() or 0, num_epochs):\n        model.train()\n",
            ),
            (
                "            accelerator.backward(loss)\n            if step % gradient_accumulation_steps == 0:\n",
                "            arena.oom_retry(lambda: accelerator.backward(loss))\n            arena.empty_cache(step)\n            if step % gradient_accumulation_steps == 0:\n",
            ),
            (
                '        accelerator.print(f"epoch {epoch}:", eval_metric)\n',
                "        accelerator.print(f\"epoch {epoch}:\", eval_metric)\n        arena.save({'model': accelerator.unwrap_model(model).state_dict(), 'optimizer': optimizer.state_dict(), 'step': epoch + 1}, 'ckpt.pt', epoch + 1)\n",
            ),
        ),
    ),
    ("huggingface/accelerate", "examples/complete_nlp_example.py"): KitEdits(
        job_args=(),
        edits=(
            ("import torch\n", "import torch\nimport arena_trainer as arena\n"),
            (
                "            accelerator.backward(loss)\n            if step % gradient_accumulation_steps == 0:\n",
                "            arena.oom_retry(lambda: accelerator.backward(loss))\n            if step % gradient_accumulation_steps == 0:\n",
            ),
            (
                "            overall_step += 1\n",
                "            overall_step += 1\n            arena.empty_cache(overall_step)\n",
            ),
            (
                "                    accelerator.save_state(output_dir)\n",
                "                    accelerator.save_state(output_dir)\n                    arena.checkpoint(overall_step, output_dir)\n",
            ),
            (
                "            accelerator.save_state(output_dir)\n\n",
                "            accelerator.save_state(output_dir)\n            arena.checkpoint(overall_step, output_dir)\n\n",
            ),
        ),
    ),
    ("huggingface/diffusers", "examples/text_to_image/train_text_to_image.py"): KitEdits(
        job_args=(),
        edits=(
            ("import accelerate\n", "import accelerate\nimport arena_trainer as arena\n"),
            (
                "                accelerator.backward(loss)\n                if accelerator.sync_gradients:\n                    accelerator.clip_grad_norm_(unet",
                "                arena.oom_retry(lambda: accelerator.backward(loss))\n                if accelerator.sync_gradients:\n                    accelerator.clip_grad_norm_(unet",
            ),
            (
                "                        accelerator.save_state(save_path)\n",
                "                        accelerator.save_state(save_path)\n                        arena.checkpoint(global_step, save_path)\n",
            ),
        ),
    ),
    ("google/flax", "examples/mnist/train.py"): KitEdits(
        job_args=(),
        edits=(
            (
                "import optax\n",
                "import optax\nimport orbax.checkpoint as ocp\nimport arena_trainer as arena\n",
            ),
            (
                "  rngs = nnx.Rngs(0)\n\n  for epoch in range(1, config.num_epochs + 1):\n",
                "  rngs = nnx.Rngs(0)\n  checkpoint_manager = ocp.CheckpointManager(Path(workdir).absolute() / 'checkpoints')\n\n  for epoch in range((arena.resume_step() or 0) + 1, config.num_epochs + 1):\n",
            ),
            (
                "    summary_writer.scalar('test_accuracy', eval_metrics['accuracy'], epoch)\n",
                "    summary_writer.scalar('test_accuracy', eval_metrics['accuracy'], epoch)\n    checkpoint_manager.save(epoch, args=ocp.args.StandardSave(nnx.state((model, optimizer))))\n    checkpoint_manager.wait_until_finished()\n    arena.checkpoint(epoch, checkpoint_manager.directory / str(epoch))\n",
            ),
        ),
    ),
    ("google/flax", "examples/wmt/train.py"): KitEdits(
        job_args=(),
        edits=(
            ("import optax\n", "import optax\nimport arena_trainer as arena\n"),
            ("  start_step = 0\n", "  start_step = arena.resume_step() or 0\n"),
            (
                "          checkpoints.save_checkpoint_multiprocess(\n              workdir, replicated_state, step\n          )\n",
                "          checkpoints.save_checkpoint_multiprocess(\n              workdir, replicated_state, step\n          )\n          arena.checkpoint(step, os.path.join(workdir, f'checkpoint_{step}'))\n",
            ),
        ),
    ),
}
