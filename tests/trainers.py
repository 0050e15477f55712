"""A tiny Trainer for the callback's tests: a few optimizer steps of a tiny model on random rows, on the
CPU, in seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tuneproof.data.collate import RowsDataset


def tiny_trainer(  # type: ignore[no-untyped-def]
    tmp_path: Path,
    accum: int,
    bucketed: bool,
    callbacks: list[Any],
    logging_steps: int = 1,
    model: Any = None,
    grad_ckpt: bool = False,
):
    """A Trainer of 3 steps on random rows; `model` defaults to a tiny llama with LoRA on three
    linears."""
    from peft import LoraConfig, get_peft_model
    from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast, Trainer, TrainingArguments

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model
    from tuneproof.train.bucketing import use_bucketing

    if model is None:
        model = build_model(resolve(config_dict("llama", pad_token_id=0)), "eager")
        model = get_peft_model(
            model, LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
        )
    rng = np.random.default_rng(0)
    rows = [{"input_ids": rng.integers(1, 200, n).tolist()} for n in rng.integers(5, 48, 48)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=3,
        gradient_accumulation_steps=accum,
        max_steps=3,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=logging_steps,
        use_cpu=True,
        seed=1,
        disable_tqdm=True,
        remove_unused_columns=False,
        gradient_checkpointing=grad_ckpt,
    )
    from tokenizers import Tokenizer, models

    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0}, "<pad>")), pad_token="<pad>"
    )
    collator = DataCollatorWithPadding(tok)

    def with_labels(features: list[dict]) -> dict:
        batch = collator(features)
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        return batch

    trainer = Trainer(model=model, args=args, train_dataset=RowsDataset(rows), data_collator=with_labels)
    if bucketed:
        use_bucketing(trainer)
    for cb in callbacks:
        trainer.add_callback(cb)
    return trainer
