"""Make a `transformers.Trainer` (or TRL's `SFTTrainer`, a Trainer subclass) batch with
`BucketBatchSampler` and pad each micro-batch only to its own longest member.

One call, before `trainer.train()`:

    sampler = use_bucketing(trainer)

The sampler is built from the Trainer's own arguments (per-device batch size, gradient
accumulation, seed, world size and rank, drop_last) and is rank-aware itself, so the
`BatchSamplerShard` that `accelerator.prepare` wraps around it is made a passthrough (`_unsharded`),
as transformers does for its own `BatchRebalanceSampler`. The Trainer calls `set_epoch` on it every epoch.

Collator: the Trainer's own is kept when it pads per batch (DataCollatorWithPadding, TRL's
collators: they also carry completion masks, which a replacement would silently drop); only
transformers' `default_data_collator`, which cannot pad, is replaced by `PadToLongest`.
"""

from __future__ import annotations

import types
import warnings
from typing import Any

import numpy as np

from tuneproof.core.errors import TuneproofError
from tuneproof.data.collate import PadToLongest
from tuneproof.data.sampler import BucketBatchSampler

__all__ = ["dataset_lengths", "use_bucketing"]


def dataset_lengths(dataset: Any) -> np.ndarray:
    """Token counts per example: a "length" column when present, else len(input_ids)."""
    columns = getattr(dataset, "column_names", None)
    if columns is not None:  # datasets.Dataset: column access, no per-row Python objects
        if "length" in columns:
            return np.asarray(dataset["length"], dtype=np.int64)
        if "input_ids" in columns:
            return np.fromiter((len(x) for x in dataset["input_ids"]), dtype=np.int64, count=len(dataset))
        raise TuneproofError(
            "the train dataset has neither 'length' nor 'input_ids'", "tokenize the dataset first"
        )
    try:
        return np.fromiter(
            (len(dataset[i]["input_ids"]) for i in range(len(dataset))), dtype=np.int64, count=len(dataset)
        )
    except (KeyError, TypeError) as e:
        raise TuneproofError(
            f"cannot read input_ids lengths from the train dataset ({e})",
            "give each example an 'input_ids' list, or pass lengths=",
        ) from None


def use_bucketing(
    trainer: Any,
    lengths: Any = None,
    *,
    bucket_width: int | None = None,
    max_tokens: int | None = None,
    pad_to_multiple_of: int = 1,
) -> BucketBatchSampler:
    """Replace the Trainer's train dataloader with a bucketing one. Returns the sampler (its
    `widths()` size the flex recompile guard)."""
    args = trainer.args
    dataset = trainer.train_dataset
    if dataset is None:
        raise TuneproofError("the Trainer has no train_dataset", "pass train_dataset to the Trainer")
    lens = dataset_lengths(dataset) if lengths is None else np.asarray(lengths)
    sampler = BucketBatchSampler(
        lens,
        args.per_device_train_batch_size,
        args.gradient_accumulation_steps,
        bucket_width=bucket_width,
        seed=args.seed,
        drop_last=args.dataloader_drop_last,
        num_replicas=args.world_size,
        rank=args.process_index,
        max_tokens=max_tokens,
    )
    collator = trainer.data_collator
    if collator is None or collator is _default_collator():
        tokenizer = getattr(trainer, "processing_class", None)
        pad_id = getattr(tokenizer, "pad_token_id", None)
        if pad_id is None:
            pad_id = getattr(trainer.model.config, "pad_token_id", None)
        if pad_id is None:
            warnings.warn(
                "neither the tokenizer nor the model config has a pad_token_id: padding with id 0 (its "
                "loss is masked with -100, but set pad_token_id if id 0 means something to your model)",
                stacklevel=2,
            )
            pad_id = 0
        collator = PadToLongest(pad_id, pad_to_multiple_of)
    elif pad_to_multiple_of != 1:
        warnings.warn(
            f"pad_to_multiple_of={pad_to_multiple_of} has no effect: the Trainer's own collator "
            f"({type(collator).__name__}) is kept and pads as it was configured",
            stacklevel=2,
        )

    def get_train_dataloader(self: Any) -> Any:
        from torch.utils.data import DataLoader

        ds = self.train_dataset
        if hasattr(ds, "column_names"):
            ds = self._remove_unused_columns(ds, description="Training")
        loader = DataLoader(
            ds,
            batch_sampler=sampler,
            collate_fn=collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        return _unsharded(self.accelerator.prepare(loader), sampler)

    trainer.get_train_dataloader = types.MethodType(get_train_dataloader, trainer)
    return sampler


def _unsharded(prepared: Any, sampler: BucketBatchSampler) -> Any:
    """The loader `accelerator.prepare` returned, its `BatchSamplerShard` made a passthrough: the
    sampler is rank-aware already, and re-sharding it would drop all but every world_size-th batch.
    This is transformers' own handling of its rank-aware `BatchRebalanceSampler` (`Trainer.
    _get_dataloader`, transformers 5.24), and it touches only the wrapper `prepare` built around this
    sampler for this loader: nothing else holds it, so nothing else sees the change. One process
    (no wrapper, or one already of 1) is left as it is."""
    from accelerate.data_loader import BatchSamplerShard  # type: ignore[import-untyped]

    shard = getattr(prepared, "batch_sampler", None)
    if isinstance(shard, BatchSamplerShard) and shard.batch_sampler is sampler and shard.num_processes != 1:
        shard.num_processes, shard.process_index = 1, 0
    return prepared


def _default_collator() -> Any:
    from transformers import default_data_collator

    return default_data_collator
