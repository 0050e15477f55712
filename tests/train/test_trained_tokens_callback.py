"""The callback's tokens that train, in real runs: TRL's SFTTrainer with assistant-only loss and
gradient accumulation (the per-step counts equal the collated batches' and `tuneproof tokens`' count;
the logged loss is the mean over each step's trained tokens), a model that does not take
num_items_in_batch (accumulation changes the loss: found), transformers' own collator with pad == eos
(every EOS masked: warned), and a micro-batch with no token to train (warned)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import tiny_tokenizers as tt
from tuneproof.labels.report import ModelFacts, check
from tuneproof.labels.rules import LabelRules
from tuneproof.train.callback import TuneproofCallback

pytestmark = pytest.mark.slow  # real Trainers: left out of mutation runs
ROWS = tt.chats(16, seed=4, answer=(1, 30))


def _sft(tmp_path: Path, model: Any, tok: Any, callback: TuneproofCallback, **config: Any) -> Any:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    peft_config = config.pop("peft_config", None)
    args = SFTConfig(
        output_dir=str(tmp_path / "out"), assistant_only_loss=True, per_device_train_batch_size=2,
        gradient_accumulation_steps=2, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
        disable_tqdm=True, **config,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(ROWS), processing_class=tok,
                          callbacks=[callback], peft_config=peft_config)  # fmt: skip


def _no_kwargs_model(tok: Any) -> Any:
    """A Llama whose forward names its arguments and takes no **kwargs: transformers' Trainer then
    cannot pass num_items_in_batch (model_accepts_loss_kwargs is False)."""
    from transformers import LlamaForCausalLM

    class NoKwargs(LlamaForCausalLM):
        def forward(self, input_ids=None, attention_mask=None, labels=None, position_ids=None):  # type: ignore[no-untyped-def, override]
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, labels=labels,
                                   position_ids=position_ids)  # fmt: skip

    base = tt.model_for(tok)
    model = NoKwargs(base.config)
    model.load_state_dict(base.state_dict())
    return model


def test_per_step_counts_equal_the_collated_batches_and_the_loss_is_the_token_mean(tmp_path: Path) -> None:
    tok = tt.tokenizer("chatml", True)
    cb = TuneproofCallback(record_base=False)
    trainer = _sft(tmp_path, tt.model_for(tok), tok, cb, num_train_epochs=1)
    direct = sum(int((b["labels"][..., 1:] != -100).sum()) for b in trainer.get_train_dataloader())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert sum(c for c in cb.trained_history if c is not None) == direct
    assert direct == check(ROWS, tok, LabelRules(assistant_only_loss=True), ModelFacts(), "rows").trained
    logged = [
        h["tuneproof/trained_tokens"] for h in trainer.state.log_history if "tuneproof/trained_tokens" in h
    ]
    assert logged == [float(c) for c in cb.trained_history if c is not None]
    assert cb.accumulation is not None and cb.accumulation.outcome == "equal", cb.accumulation.line
    assert cb.accumulation.numbers["micro_batches"] == 2
    assert cb._loss_hook is None  # removed once the check is made: later forwards do not pay for it


def test_a_model_without_num_items_in_batch_is_found_to_change_the_loss(tmp_path: Path) -> None:
    tok = tt.tokenizer("chatml", True)
    cb = TuneproofCallback(record_base=False)
    trainer = _sft(tmp_path, _no_kwargs_model(tok), tok, cb, max_steps=2)
    with pytest.warns(UserWarning, match="accumulation check: .*mean of the micro-batches' means.*37766"):
        trainer.train()
    assert cb.accumulation is not None and cb.accumulation.outcome == "changed"
    n = cb.accumulation.numbers
    assert n["reported"] == pytest.approx(n["mean_of_means"], rel=1e-5)
    assert abs(n["token_mean"] - n["mean_of_means"]) > 1e-4


def _lm_trainer(
    tmp_path: Path, rows: list[dict[str, Any]], tok: Any, cb: TuneproofCallback, collator: Any
) -> Any:
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, max_steps=2, report_to=[],
        use_cpu=True, save_strategy="no", logging_steps=1, disable_tqdm=True, remove_unused_columns=False,
    )  # fmt: skip
    return Trainer(model=tt.model_for(tok), args=args, train_dataset=rows, data_collator=collator,
                   processing_class=tok, callbacks=[cb])  # fmt: skip


def test_pad_equal_to_eos_under_transformers_collator_is_warned_at_the_first_step(tmp_path: Path) -> None:
    from transformers import DataCollatorForLanguageModeling

    tok = tt.tokenizer("chatml", True, pad="<|im_end|>")  # pad == eos
    rows = [{"input_ids": tok(f"w{i} w{i + 1} w7 <|im_end|>")["input_ids"]} for i in range(8)]
    cb = TuneproofCallback(record_base=False)
    trainer = _lm_trainer(tmp_path, rows, tok, cb, DataCollatorForLanguageModeling(tok, mlm=False))
    with pytest.warns(UserWarning, match=r"every EOS \(id 4\) in the batch is masked.*pad id is the EOS's"):
        trainer.train()
    texts = [{"text": f"w{i} w{i + 1} w7 <|im_end|>"} for i in range(8)]
    report = check(texts, tok, LabelRules(trainer="transformers"), ModelFacts(), "rows")
    found = {f.kind: f.count for f in report.findings}
    assert found == {"eos_untrained": 8, "pad_is_eos": 8}


def test_a_micro_batch_with_no_token_to_train_is_warned(tmp_path: Path) -> None:
    from transformers import DataCollatorForSeq2Seq

    tok = tt.tokenizer("chatml", True)
    rows = []
    for i in range(8):
        ids = tok(f"w{i} w3 w4")["input_ids"]
        rows.append({"input_ids": ids, "labels": [-100] * len(ids)})  # a prompt truncated to nothing trained
    cb = TuneproofCallback(record_base=False)
    trainer = _lm_trainer(tmp_path, rows, tok, cb, DataCollatorForSeq2Seq(tok))
    with pytest.warns(UserWarning, match="a micro-batch has no token to train .*nor does any of the step"):
        trainer.train()
    assert cb.trained_history[:2] == [0, 0]
    assert cb.accumulation is not None and cb.accumulation.outcome == "unchecked"
    assert "train no token" in cb.accumulation.line


def test_trls_default_path_packing_padding_free_checkpointing_and_a_lora(tmp_path: Path) -> None:
    """The path users take without thinking: bfd packing (padding-free rows, position_ids, no mask),
    gradient checkpointing, a PEFT LoRA on all-linear. The per-step counts still equal the collated
    batches', and the logged loss is still the mean over each step's trained tokens."""
    from peft import LoraConfig

    tok = tt.tokenizer("chatml", True)
    cb = TuneproofCallback(record_base=False)
    trainer = _sft(
        tmp_path, tt.model_for(tok), tok, cb, num_train_epochs=1, packing=True, max_length=64,
        gradient_checkpointing=True, peft_config=LoraConfig(r=4, target_modules="all-linear"),
    )  # fmt: skip
    assert trainer.padding_free
    direct = sum(int((b["labels"][..., 1:] != -100).sum()) for b in trainer.get_train_dataloader())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    assert sum(c for c in cb.trained_history if c is not None) == direct
    rules = LabelRules(assistant_only_loss=True, packing="bfd", max_length=64)
    assert direct == check(ROWS, tok, rules, ModelFacts(), "rows").trained
    assert cb.accumulation is not None and cb.accumulation.outcome == "equal", cb.accumulation.line
