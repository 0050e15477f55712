"""The Trainer of a run: its arguments from the recipe, transformers' `Trainer` for text rows or TRL's
`SFTTrainer` for chat rows, and what it prints kept off stdout (which carries the summary or JSON)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.data.collate import RowsDataset
from tuneproof.runs.recipe import Recipe


def training_args(recipe: Recipe, out: Path, chat: bool, cuda: bool, quiet: bool) -> Any:
    """`TrainingArguments` (text rows) or TRL's `SFTConfig` (chat rows) for the recipe, checkpoints
    under OUT/checkpoints. Building them sets up the processes (accelerate's state): their
    `process_index` is the Trainer's own notion of the main process (`is_world_process_zero`)."""
    opt = recipe.optim
    kwargs: dict[str, Any] = dict(
        output_dir=str(out / "checkpoints"), per_device_train_batch_size=opt.micro_batch,
        gradient_accumulation_steps=opt.grad_accum, learning_rate=opt.lr, lr_scheduler_type=opt.schedule,
        warmup_steps=opt.warmup_ratio, num_train_epochs=opt.epochs, max_steps=opt.max_steps,
        activation_checkpointing=opt.grad_ckpt, seed=opt.seed, logging_steps=recipe.run.logging_steps,
        save_strategy="steps", save_steps=recipe.run.save_steps, save_total_limit=2, disable_tqdm=quiet,
        report_to=[], use_cpu=not cuda, bf16=cuda, remove_unused_columns=False, log_level="warning",
    )  # fmt: skip
    if not chat:
        from transformers import TrainingArguments

        return TrainingArguments(**kwargs)
    from trl import SFTConfig

    return SFTConfig(
        **kwargs, max_length=recipe.data.max_length, assistant_only_loss=recipe.data.assistant_only_loss,
        packing=False, padding_free=False,
    )  # fmt: skip


def build_trainer(
    model: Any,
    tokenizer: Any,
    recipe: Recipe,
    data: Any,
    out: Path,
    cuda: bool,
    quiet: bool,
    args: Any = None,
) -> Any:
    """transformers' Trainer on tokenised text rows; TRL's SFTTrainer on chat records (it applies the
    chat template and, with data.assistant_only_loss, masks every token outside the assistant's turns).
    `args`: the run's `training_args` when built already (`prepare` builds them), else built here."""
    chat = isinstance(data[0].get("messages"), list)
    if args is None:
        args = training_args(recipe, out, chat, cuda, quiet)
    if not chat:
        from transformers import Trainer

        return fsdp_on_cpu(Trainer(model=model, args=args, train_dataset=RowsDataset(data)))
    from datasets import Dataset
    from trl import SFTTrainer

    chats = Dataset.from_list([{"messages": r["messages"]} for r in data])
    try:
        trainer = SFTTrainer(model=model, args=args, train_dataset=chats, processing_class=tokenizer)
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError) as e:
        raise TuneproofError(
            f"TRL's SFTTrainer cannot prepare the chat rows: {str(e).splitlines()[0][:200]}",
            "check the rows' 'messages' against the model's chat template",
        ) from None
    return fsdp_on_cpu(trainer)


def fsdp_on_cpu(trainer: Any) -> Any:
    """An FSDP2 launch (`accelerate launch` with `distributed_type: FSDP`, `fsdp_version: 2`) honoured
    on the CPU, where accelerate (1.15) silently trains with DDP instead: `AcceleratorState` picks FSDP
    only on an accelerator's distributed types, never on MULTI_CPU, though `fully_shard` runs on the
    CPU with gloo. The Trainer's accelerator is switched to FSDP with the plugin the launcher's
    environment describes, before `train()` wraps the model. FSDP1 on the CPU is warned about and left
    to DDP (not tried). Returns the trainer."""
    import os

    from accelerate.state import PartialState  # type: ignore[import-untyped]
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin  # type: ignore[import-untyped]

    state = trainer.accelerator.state
    asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if not asked or state.distributed_type != DistributedType.MULTI_CPU:
        return trainer
    plugin = FullyShardedDataParallelPlugin()  # read from the launcher's environment, as accelerate does
    if plugin.fsdp_version != 2:
        import warnings

        warnings.warn("tuneproof: FSDP1 on the CPU trains with DDP (accelerate's choice)", stacklevel=3)
        return trainer
    state.fsdp_plugin = plugin
    state.distributed_type = PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    trainer.is_fsdp_enabled = True
    return trainer


def quiet_logs(trainer: Any, bar: bool) -> None:
    """stdout carries the summary (or the caller's JSON): the Trainer's printed log dicts go (they are
    in trainer_state.json and the report), and its progress bar stays on stderr when `bar`."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            return None  # ProgressCallback writes every log dict to stdout (tqdm.write)

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if bar:
        trainer.add_callback(BarOnly())


@contextmanager
def progress_bars_off(off: bool) -> Iterator[None]:
    """transformers' and datasets' progress bars (loading weights, mapping rows) off while the run is
    in this block, when `off` (stdout carries the caller's JSON, stderr stays for errors), and back
    as they were after it: both switches are process-wide."""
    if not off:
        yield
        return
    from transformers.utils import logging as hf_logging

    try:
        import datasets
    except ImportError:
        datasets = None
    hf_was_on = hf_logging.is_progress_bar_enabled()
    ds_was_on = datasets is not None and not datasets.are_progress_bars_disabled()
    hf_logging.disable_progress_bar()
    if datasets is not None:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if hf_was_on:
            hf_logging.enable_progress_bar()
        if ds_was_on:
            datasets.enable_progress_bars()
