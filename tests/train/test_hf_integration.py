"""use_bucketing with a real transformers Trainer on a tiny model, a few steps on CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tuneproof.data.collate import RowsDataset
from tuneproof.train.bucketing import use_bucketing

pytestmark = pytest.mark.slow  # real processes / a real Trainer: left out of mutation runs


def test_trainer_trains_with_bucketed_micro_batches(tmp_path: Path) -> None:
    from transformers import Trainer, TrainingArguments

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    cfg = config_dict("llama", num_hidden_layers=1, pad_token_id=0)
    model = build_model(resolve(cfg), "sdpa")
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 60, 64)
    rows = [{"input_ids": rng.integers(1, 64, n).tolist()} for n in lengths]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=4,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        seed=3,
        disable_tqdm=True,
    )
    trainer = Trainer(model=model, args=args, train_dataset=RowsDataset(rows))
    sampler = use_bucketing(trainer)
    loader = trainer.get_train_dataloader()
    batches = list(loader)
    assert len(batches) == len(sampler) == 32
    padding = 0
    for b in batches:
        real = b["attention_mask"].sum(dim=1)
        assert b["input_ids"].shape[1] == int(real.max())  # padded to its own longest member only
        padding += int((b["attention_mask"] == 0).sum())
    assert padding / sum(b["input_ids"].numel() for b in batches) < 0.05
    result = trainer.train()
    assert result.global_step == 4 and np.isfinite(result.training_loss)
    assert (
        sampler.epoch == 0 and sampler.widths()
    )  # the Trainer set the epoch; widths size the recompile guard


def test_trl_sft_trainer_keeps_its_collator_and_trains(tmp_path: Path) -> None:
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    from trl import SFTConfig, SFTTrainer

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    model = build_model(resolve(config_dict("llama", num_hidden_layers=1, pad_token_id=0)), "sdpa")
    vocab = {f"t{i}": i for i in range(64)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")),
        pad_token="t0",
        eos_token="t2",
        unk_token="t1",
    )
    rng = np.random.default_rng(0)
    lengths = rng.integers(4, 60, 64)
    dataset = Dataset.from_dict({"input_ids": [rng.integers(3, 64, n).tolist() for n in lengths]})
    args = SFTConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=3,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        dataset_kwargs={"skip_prepare_dataset": True},
        remove_unused_columns=False,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    own = trainer.data_collator
    sampler = use_bucketing(trainer)
    batches = list(trainer.get_train_dataloader())
    assert trainer.data_collator is own and len(batches) == len(sampler)
    widths = [b["input_ids"].shape[1] for b in batches]
    maxima = [int(lengths[idx].max()) for idx in sampler.plan()]
    assert widths == maxima  # TRL's collator pads each micro-batch to its own longest member
    result = trainer.train()
    assert result.global_step == 3 and np.isfinite(result.training_loss)


def _trainer(tmp_path: Path, pad_token_id: int | None, collator=None):  # type: ignore[no-untyped-def]
    from transformers import Trainer, TrainingArguments

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    extra = {} if pad_token_id is None else {"pad_token_id": pad_token_id}
    model = build_model(resolve(config_dict("llama", num_hidden_layers=1, **extra)), "sdpa")
    model.config.pad_token_id = pad_token_id
    rows = [{"input_ids": list(range(1, n))} for n in (5, 9, 9, 12)]
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=2, report_to=[], use_cpu=True
    )
    return Trainer(model=model, args=args, train_dataset=RowsDataset(rows), data_collator=collator)


def test_a_pad_id_that_defaults_to_zero_is_warned_about(tmp_path: Path) -> None:
    import pytest

    with pytest.warns(UserWarning, match="padding with id 0"):
        use_bucketing(_trainer(tmp_path, pad_token_id=None))


def test_pad_to_multiple_of_with_a_kept_collator_is_warned_about(tmp_path: Path) -> None:
    import warnings

    import pytest

    from tuneproof.data import PadToLongest

    own = PadToLongest(0)
    with pytest.warns(UserWarning, match="pad_to_multiple_of=8 has no effect"):
        use_bucketing(_trainer(tmp_path, 0, collator=own), pad_to_multiple_of=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a pad id given and the default multiple: no warning at all
        use_bucketing(_trainer(tmp_path, 0))
