"""TuneproofCallback on the paths users take by default: TRL's SFTTrainer with packing (`bfd`: padding-free
rows) and `padding_free`, transformers' DataCollatorWithFlattening, a collator that sends no mask, and a
MoE under PEFT's all-linear. Each step's performed FLOPs equal FlopCounterMode's count of that step
(eager attention: the counter sees every score), intended FLOPs equal the ledger priced on the
documents the test reads itself from each batch's position_ids, and the padded run on the same rows."""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_callback import TOL, CountEachStep, _trainer

from tuneproof.attention.isolation import TOLERANCE
from tuneproof.train.callback import ISOLATION_TOKENS, TuneproofCallback

pytestmark = pytest.mark.slow  # real Trainers


class Batches:
    """A forward pre-hook of the test's own: every training micro-batch's documents per row, read from
    its position_ids (a document starts at position 0) and its labels/mask, per optimizer step."""

    def __init__(self) -> None:
        self.steps: list[list[tuple[tuple[int, ...], ...]]] = [[]]

    def hook(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        if not module.training:
            return
        ids = kwargs["input_ids"]
        positions = kwargs.get("position_ids")
        mask = kwargs.get("attention_mask")
        rows = []
        for r in range(ids.shape[0]):
            real = int(mask[r].sum()) if mask is not None else int(ids.shape[1])
            if mask is None and kwargs.get("labels") is not None:  # trailing pad id 0 with label -100
                pad = ((kwargs["labels"][r] == -100) & (ids[r] == 0)).tolist()
                while real > 1 and pad[real - 1]:
                    real -= 1
            starts = [0]
            if positions is not None:
                starts = [i for i, p in enumerate(positions[r].tolist()[:real]) if p == 0]
            bounds = [*starts, real]
            rows.append(tuple(b - a for a, b in pairwise(bounds)))
        self.steps[-1].append(tuple(rows))

    def intended(self, model: Any, step: Any) -> list[float]:
        """Per optimizer step, the ledger's intended FLOPs of its micro-batches, documents apart."""
        from dataclasses import replace

        from tuneproof.flops import flop_report

        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        from tuneproof.arch import resolve

        shape = resolve(base.config).shape
        out = []
        for micro in self.steps[: len(self.steps) - (not self.steps[-1])]:
            total = 0.0
            for rows in micro:
                width = max(sum(r) for r in rows)
                spec = replace(step, seq_len=width, batch=len(rows), documents=rows, lengths=None)
                total += flop_report(shape, spec).intended.total
            out.append(total)
        return out


class StepMarks(CountEachStep):
    """FlopCounterMode per step, and the test's batch reader told where a step ends."""

    def __init__(self, batches: Batches) -> None:
        super().__init__()
        self.batches = batches

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        super().on_step_end(args, state, control, **kwargs)
        self.batches.steps.append([])


def _rows(n: int = 48, seed: int = 0) -> list[dict[str, list[int]]]:
    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(2, 200, k).tolist()} for k in rng.integers(5, 48, n)]


def _tokenizer() -> Any:
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, "<pad>")), pad_token="<pad>", eos_token="<eos>"
    )


def _llama(attn: str) -> Any:
    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    return build_model(resolve(config_dict("llama", pad_token_id=0)), attn)


def _sft(tmp_path: Path, attn: str, callbacks: list[Any], **config: Any) -> Any:
    """TRL's SFTTrainer with its defaults (gradient checkpointing on, PEFT's all-linear), 3 steps."""
    from datasets import Dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=3, max_steps=3, report_to=[],
        save_strategy="no", logging_steps=1, use_cpu=True, seed=1, disable_tqdm=True, **config,
    )  # fmt: skip
    return SFTTrainer(
        model=_llama(attn), args=args, train_dataset=Dataset.from_list(_rows()),
        processing_class=_tokenizer(), callbacks=callbacks,
        peft_config=LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0),
    )  # fmt: skip


def _run(trainer: Any, ours: TuneproofCallback) -> Batches:
    batches = Batches()
    counter = next(c for c in trainer.callback_handler.callbacks if isinstance(c, StepMarks))
    counter.batches = batches
    trainer.model.register_forward_pre_hook(batches.hook, with_kwargs=True)
    trainer.train()
    return batches


def _counted(trainer: Any) -> list[int]:
    return next(c for c in trainer.callback_handler.callbacks if isinstance(c, StepMarks)).counts


def _check(trainer: Any, ours: TuneproofCallback, batches: Batches) -> None:
    """Performed == FlopCounterMode, intended == the ledger on the test's own document reading."""
    counted = _counted(trainer)
    assert len(ours.history) == len(counted) == 3
    assert ours._run is not None
    for step, count, intended in zip(
        ours.history, counted, batches.intended(trainer.model, ours._run.step), strict=True
    ):
        assert abs(step.performed / count - 1) < TOL, (step, count)
        assert step.intended == pytest.approx(intended, rel=1e-9)


@pytest.mark.parametrize("config", [{"packing": True}, {"padding_free": True, "max_length": None}])
def test_sft_packing_and_padding_free_are_priced_per_document(tmp_path: Path, config: dict) -> None:
    """TRL's default packing (bfd: padding-free rows, position_ids and cu_seq_lens) and padding_free
    alone: documents read from the batch, intended per document, performed the full square eager runs."""
    ours = TuneproofCallback()
    trainer = _sft(
        tmp_path, "eager", [StepMarks(Batches()), ours], max_length=config.pop("max_length", 128), **config
    )
    batches = _run(trainer, ours)
    _check(trainer, ours, batches)
    assert all(len(row) > 1 for micro in batches.steps[0] for row in micro)  # really packed
    assert all(s.intended < 0.6 * s.performed for s in ours.history)


def test_padding_free_bills_the_same_intended_flops_as_the_padded_run_on_the_same_rows(
    tmp_path: Path,
) -> None:
    runs = {}
    for name, config in (("padded", {}), ("padding_free", {"padding_free": True})):
        ours = TuneproofCallback()
        trainer = _sft(tmp_path / name, "eager", [StepMarks(Batches()), ours], max_length=None, **config)
        _run(trainer, ours)
        runs[name] = ours.history
    for padded, free in zip(runs["padded"], runs["padding_free"], strict=True):
        assert free.tokens == padded.tokens
        assert free.intended == pytest.approx(padded.intended, rel=1e-9)
    assert sum(s.slots for s in runs["padding_free"]) < sum(s.slots for s in runs["padded"])


def test_packed_sdpa_performs_the_full_square(tmp_path: Path, monkeypatch) -> None:
    """Under SDPA transformers hands packed rows a block mask: the kernel computes the full square (and
    its fused backward recomputes QK^T); less that recompute, the step equals eager's FlopCounterMode
    count on the same batches."""
    import tuneproof.train.callback as cb

    reads: list[list[Any]] = []
    price = cb.price_step

    def recording(ledger, step, batch_reads, seconds):  # type: ignore[no-untyped-def]
        reads.append(list(batch_reads))
        return price(ledger, step, batch_reads, seconds)

    monkeypatch.setattr(cb, "price_step", recording)
    sdpa = TuneproofCallback()
    _run(_sft(tmp_path / "sdpa", "sdpa", [StepMarks(Batches()), sdpa], packing=True, max_length=128), sdpa)
    monkeypatch.setattr(cb, "price_step", price)
    eager = _sft(tmp_path / "eager", "eager", [StepMarks(Batches())], packing=True, max_length=128)
    eager.train()
    assert sdpa._run is not None
    for step, micro, count in zip(sdpa.history, reads, _counted(eager), strict=True):
        recompute = sum(
            sdpa._run.ledger.report(r).performed.where(component_prefix="attention.qk_kernel_recompute")
            for r in micro
        )
        assert recompute > 0
        assert abs((step.performed - recompute) / count - 1) < TOL, (step, count)


def test_the_flattening_collator_and_a_maskless_collator(tmp_path: Path) -> None:
    """transformers' DataCollatorWithFlattening (position_ids, no mask), and a collator that pads with
    the pad id and labels -100 but sends no attention_mask: padding found from them, said so."""
    from transformers import DataCollatorWithFlattening

    def maskless(features: list[dict]) -> dict:
        import torch

        width = max(len(f["input_ids"]) for f in features)
        ids = torch.zeros(len(features), width, dtype=torch.long)
        for i, f in enumerate(features):
            ids[i, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        return {"input_ids": ids, "labels": ids.masked_fill(ids == 0, -100)}

    results = {}
    for name, collator in (("flat", DataCollatorWithFlattening()), ("maskless", maskless), ("padded", None)):
        ours = TuneproofCallback()
        trainer = _trainer(tmp_path / name, 1, False, [StepMarks(Batches()), ours])
        if collator is not None:
            trainer.data_collator = collator
        batches = _run(trainer, ours)
        _check(trainer, ours, batches)
        results[name] = ours.history
    for padded, flat, maskless_step in zip(
        results["padded"], results["flat"], results["maskless"], strict=True
    ):
        assert flat.intended == pytest.approx(padded.intended, rel=1e-9)
        assert maskless_step.intended == pytest.approx(padded.intended, rel=1e-9)
        assert maskless_step.tokens == padded.tokens < maskless_step.slots


def test_the_maskless_padding_is_warned_with_its_source(tmp_path: Path) -> None:
    def maskless(features: list[dict]) -> dict:
        import torch

        ids = torch.zeros(len(features), 64, dtype=torch.long)
        for i, f in enumerate(features):
            ids[i, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        return {"input_ids": ids, "labels": ids.masked_fill(ids == 0, -100)}

    trainer = _trainer(tmp_path, 1, False, [TuneproofCallback()])
    trainer.data_collator = maskless
    with pytest.warns(UserWarning, match=r"padding \(found from labels == -100 and pad id 0"):
        trainer.train()


def test_packed_rows_sent_with_a_2d_mask_are_warned_as_documents_attending_to_each_other(
    tmp_path: Path,
) -> None:
    from transformers import DataCollatorWithFlattening

    flatten = DataCollatorWithFlattening()

    def with_mask(features: list[dict]) -> dict:
        import torch

        batch = flatten(features)
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        return batch

    ours = TuneproofCallback(check_isolation=True)
    trainer = _trainer(tmp_path, 1, False, [StepMarks(Batches()), ours])
    trainer.data_collator = with_mask
    with pytest.warns(UserWarning, match="attend to each other under eager: a 2-D attention_mask"):
        trainer.train()
    # from step 2: the first step's count also holds the check's own forwards (the Trainer runs our
    # on_step_end before the counter's)
    for step, count in zip(ours.history[1:], _counted(trainer)[1:], strict=True):
        assert abs(step.performed / count - 1) < TOL
    # the first-step check runs the row as it came, its 2-D mask included, and sees the leak
    assert ours.isolation is not None and not ours.isolation.isolated
    assert " attend to the documents before them from layer 0" in ours.isolation.summary()


def test_the_first_step_check_proves_trl_packing_keeps_documents_apart(tmp_path: Path, capsys) -> None:
    """TRL's default packing under SDPA (transformers' packed block mask): the first packed row of the
    first step, its own tokens and position_ids, run packed and document by document: isolated, said on
    stderr (a proof, not a warning), with the bf16 tolerance TRL's default bf16=True computes in."""
    ours = TuneproofCallback(check_isolation=True)
    trainer = _sft(tmp_path, "sdpa", [ours], packing=True, max_length=128)
    trainer.train()
    assert "tuneproof: packed documents on sdpa: isolated (max |dlogit|" in capsys.readouterr().err
    assert ours.isolation is not None and ours.isolation.isolated and len(ours.isolation.docs) >= 2
    assert trainer.args.bf16 and ours.isolation.tolerance >= TOLERANCE["bfloat16"]
    assert sum(ours.isolation.docs) <= ISOLATION_TOKENS


def test_a_model_whose_forward_hides_packing_is_priced_and_proved_as_one_sequence_per_row(
    tmp_path: Path,
) -> None:
    """gpt-oss in transformers 5.24 builds its masks without position_ids: DataCollatorWithFlattening's
    rows run as one causal sequence each. The callback says why, prices them so (equal to the counter),
    and its first-step check finds document 2 seeing document 1."""
    from peft import LoraConfig, get_peft_model
    from transformers import DataCollatorWithFlattening

    from tiny_models import build_model, config_dict

    model = build_model(config_dict("gpt_oss", pad_token_id=0))
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    ours = TuneproofCallback(check_isolation=True)
    trainer = _trainer(tmp_path, 1, False, [StepMarks(Batches()), ours], model=model)
    trainer.data_collator = DataCollatorWithFlattening()
    with pytest.warns(UserWarning, match="GptOssModel.forward builds its masks without position_ids") as said:
        trainer.train()
    lines = [str(w.message) for w in said]
    assert any("pack only on flash_attention_2 (it reads the packed position_ids)" in w for w in lines)
    assert not any("use flex_attention" in w for w in lines)  # flex would not keep them apart either
    for step, count in zip(ours.history[1:], _counted(trainer)[1:], strict=True):  # step 1: the check too
        assert abs(step.performed / count - 1) < TOL
    assert ours.isolation is not None and not ours.isolation.isolated
    assert "GptOssModel.forward" in ours.isolation.summary()


def test_a_moe_under_all_linear_is_priced_at_the_ranks_peft_created(tmp_path: Path) -> None:
    """PEFT 0.21's all-linear on Qwen3-MoE wraps the experts (gate_up_proj at twice the rank) and the
    router's 2-D weight through target_parameters: each priced at its own rank, equal to the counter."""
    from peft import LoraConfig, get_peft_model

    from tiny_models import build_model, config_dict
    from tuneproof.runs.trainer import lora_of

    model = build_model(config_dict("qwen3_moe", pad_token_id=0))
    with pytest.warns(RuntimeWarning):  # PEFT's own: its rank_pattern key matches no module on some layers
        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
    adapters = lora_of(model)
    assert adapters.rank == 4 and ("mlp.experts.gate_up_proj", 8) in adapters.ranks
    assert "mlp.gate.weight" in adapters.parameters
    ours = TuneproofCallback()
    trainer = _trainer(tmp_path, 1, False, [StepMarks(Batches()), ours], model=model)
    _check(trainer, ours, _run(trainer, ours))


def test_modules_to_save_are_priced_as_trained_whole(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(
        _llama("eager"),
        LoraConfig(
            r=4, target_modules=["q_proj"], modules_to_save=["lm_head", "embed_tokens"], lora_dropout=0.0
        ),
    )
    ours = TuneproofCallback()
    trainer = _trainer(tmp_path, 1, False, [StepMarks(Batches()), ours], model=model)
    batches = _run(trainer, ours)
    assert ours._run is not None and ours._run.step.lora_modules_to_save == ("embed_tokens", "lm_head")
    _check(trainer, ours, batches)


def test_every_step_is_logged_once_and_the_last_are_flushed_at_train_end(tmp_path: Path) -> None:
    ours = TuneproofCallback()
    trainer = _trainer(tmp_path, 1, False, [ours], logging_steps=3)
    trainer.args.max_steps = 10
    trainer.train()
    logged = [h for h in trainer.state.log_history if "tuneproof/flops_performed" in h]
    assert sum(h["tuneproof/steps"] for h in logged) == len(ours.history) == 10
    assert sum(h["tuneproof/flops_performed"] for h in logged) == pytest.approx(
        sum(s.performed for s in ours.history), rel=1e-12
    )
    assert "train_runtime" in logged[-1] and logged[-1]["tuneproof/steps"] == 1  # step 10


def test_only_the_main_process_warns(tmp_path: Path, recwarn) -> None:
    from transformers import TrainerState

    ours = TuneproofCallback()
    trainer = _trainer(tmp_path, 1, False, [ours])
    state = TrainerState()
    state.is_world_process_zero = False
    ours.on_train_begin(trainer.args, state, None, model=trainer.model)
    ours._say("tuneproof: a warning")
    assert not [w for w in recwarn if "tuneproof" in str(w.message)]
