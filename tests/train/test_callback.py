"""TuneproofCallback: its performed FLOPs per optimizer step equal FlopCounterMode's count of that
same step in a real Trainer (eager attention, LoRA via PEFT), with bucketed and padded batches and
gradient accumulation 1 and 4; and its metrics reach the Trainer's logs."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback

from trainers import tiny_trainer as _trainer
from tuneproof.flops.microbatch import MicroBatchLedger
from tuneproof.runs.batch import BatchRead
from tuneproof.train.callback import TuneproofCallback

pytestmark = pytest.mark.slow  # a real Trainer: left out of mutation runs
TOL = 0.005


class CountEachStep(TrainerCallback):
    """FlopCounterMode around each optimizer step: from on_step_begin to on_step_end."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self._mode: Any = None

    def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
        self._mode.__exit__(None, None, None)
        self.counts.append(int(self._mode.get_total_flops()))


@pytest.mark.parametrize("accum", [1, 4])
@pytest.mark.parametrize("bucketed", [True, False], ids=["bucketed", "padded"])
def test_performed_flops_equal_flop_counter_for_each_step(tmp_path: Path, accum: int, bucketed: bool) -> None:
    ours, counter = TuneproofCallback(), CountEachStep()
    trainer = _trainer(tmp_path, accum, bucketed, [counter, ours])
    trainer.train()
    assert len(ours.history) == len(counter.counts) == 3
    for step, counted in zip(ours.history, counter.counts, strict=True):
        assert step.micro_batches == accum
        assert abs(step.performed / counted - 1) < TOL, (step, counted)
    padding = 1 - sum(s.tokens for s in ours.history) / sum(s.slots for s in ours.history)
    assert (padding < 0.1) if bucketed else (padding > 0.2)  # the two cases really differ


def test_the_metrics_reach_the_logs_and_the_log_history(tmp_path: Path) -> None:
    seen: list[dict] = []

    class Reporter(TrainerCallback):  # stands for TensorBoard / W&B: registered before ours
        def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
            seen.append(dict(logs or {}))

    trainer = _trainer(tmp_path, 1, True, [Reporter(), TuneproofCallback(peak_tflops=1.0)])
    trainer.train()
    logged = [log for log in seen if "loss" in log]
    assert len(logged) == 3
    for log in logged:
        assert log["tuneproof/tflops_performed"] >= log["tuneproof/tflops_intended"] > 0
        assert log["tuneproof/mfu_performed"] == pytest.approx(log["tuneproof/tflops_performed"])
        assert 0 <= log["tuneproof/padding"] < 1 and log["tuneproof/recompiles"] == 0
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert all("tuneproof/tflops_intended" in h for h in history)


def test_without_a_peak_the_mfus_are_left_out_with_the_reason(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, 1, True, [TuneproofCallback()])
    with pytest.warns(UserWarning, match="no MFU: no peak for a cpu device") as record:
        trainer.train()
    # filed under tuneproof, not under the Trainer's dispatch line that called the callback
    ours = [w for w in record if str(w.message).startswith("tuneproof:")]
    assert ours and all(w.filename == "tuneproof" for w in ours)
    history = [h for h in trainer.state.log_history if "loss" in h]
    assert "tuneproof/mfu_performed" not in history[0] and "tuneproof/tflops_performed" in history[0]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_the_cached_row_ledger_equals_the_ledger_on_whole_batches(attn: str) -> None:
    from tuneproof.arch import resolve
    from tuneproof.flops import Step, flop_report

    gemma4 = "examples/gemma4-26b-a4b-like/config.json"
    experts = ("experts.gate_up_proj", "experts.down_proj")  # merged once per micro-batch, not per row
    for config, params in (("tiny", ()), (gemma4, ()), (gemma4, experts)):
        shape = resolve(config).shape
        step = Step(
            seq_len=1, attn=attn, mode="lora", lora_rank=8, grad_ckpt=True,
            lora_targets=("self_attn.q_proj",), lora_target_parameters=params,
        )  # fmt: skip
        ledger = MicroBatchLedger(shape, step)
        rng = random.Random(0)
        for _ in range(15):
            batch, width = rng.randint(1, 4), rng.randint(2, 300)
            rows = tuple(rng.choice([width, rng.randint(1, width)]) for _ in range(batch))
            direct = flop_report(shape, replace(step, seq_len=width, batch=batch, lengths=rows))
            assert ledger.micro_batch(BatchRead.padded(batch, width, rows)) == pytest.approx(
                (direct.intended.total, direct.performed.total), rel=1e-9
            )


def test_a_bad_peak_is_refused() -> None:
    from tuneproof.core.errors import TuneproofError

    for bad in (0, -1, float("nan"), "989", True):
        with pytest.raises(TuneproofError, match="peak_tflops"):
            TuneproofCallback(peak_tflops=bad)  # type: ignore[arg-type]


def test_train_end_logs_adapter_health_and_records_the_base_fingerprint(tmp_path: Path, capsys) -> None:
    """A base loaded from a local folder: its fingerprint lands in output_dir, the one merge checks."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, Trainer

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model
    from tuneproof.ship import fingerprint, read_fingerprint

    build_model(resolve(config_dict("llama", pad_token_id=0)), "eager").save_pretrained(tmp_path / "base")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "base", attn_implementation="eager")
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    trainer = _trainer(tmp_path / "out", 1, True, [])
    trainer = Trainer(
        model=model,
        args=trainer.args,
        train_dataset=trainer.train_dataset,
        data_collator=trainer.data_collator,
    )
    callback = TuneproofCallback(peak_tflops=1.0)
    trainer.add_callback(callback)
    trainer.train()
    assert "adapter health: lora_B non-zero in 4 of 4 adapted modules" in capsys.readouterr().err
    assert callback.health.healthy
    recorded = read_fingerprint(tmp_path / "out" / "base_fingerprint.json")
    assert recorded.digest == fingerprint(tmp_path / "base").digest


def test_a_base_built_from_a_config_cannot_be_fingerprinted_and_says_so(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, 1, True, [TuneproofCallback(peak_tflops=1.0)])
    with pytest.warns(UserWarning, match="is not a local safetensors folder: no base_fingerprint.json"):
        trainer.train()
    assert not (tmp_path / "base_fingerprint.json").exists()


def _gemma_trainer(tmp_path: Path, callbacks: list[Any]):  # type: ignore[no-untyped-def]
    """The embedded tiny Gemma-4-style model (sliding and global layers) with sdpa, padded batches."""
    from peft import LoraConfig, get_peft_model
    from transformers import Trainer

    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    model = build_model(resolve("tiny"), "sdpa")
    model.config.pad_token_id = 0
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"], lora_dropout=0.0))
    plain = _trainer(tmp_path, 1, False, [])
    trainer = Trainer(
        model=model, args=plain.args, train_dataset=plain.train_dataset, data_collator=plain.data_collator
    )
    for cb in callbacks:
        trainer.add_callback(cb)
    return trainer


def test_the_first_step_warns_about_padding_and_the_slow_attention_path(tmp_path: Path) -> None:
    trainer = _gemma_trainer(tmp_path, [TuneproofCallback(peak_tflops=1.0)])
    with pytest.warns(UserWarning) as record:
        trainer.train()
    messages = [str(w.message) for w in record if str(w.message).startswith("tuneproof:")]
    assert sum("of the first step's token slots are padding" in m for m in messages) == 1
    assert any("slow attention path at width" in m and "use flex_attention" in m for m in messages)
    assert any("bucket to avoid padding" in m for m in messages)


def test_compiled_flex_near_the_recompile_limit_is_warned_once(tmp_path: Path, monkeypatch) -> None:
    import tuneproof.train.callback as cb

    frames = iter(range(0, 1000, 4))
    monkeypatch.setattr(cb, "_frames_compiled", lambda: next(frames))
    monkeypatch.setattr(cb, "_recompile_limit", lambda: 8)

    class FlexRun(TuneproofCallback):
        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            super().on_train_begin(*args, **kwargs)
            assert self._run is not None
            # the ledger keeps its own step (eager): only the guard is under test
            self._run.step = replace(self._run.step, attn="flex_attention")

    trainer = _trainer(tmp_path, 1, True, [FlexRun(peak_tflops=1.0)])
    with pytest.warns(UserWarning) as record:
        trainer.train()
    near = [w for w in record if "near dynamo's limit of 8" in str(w.message)]
    assert len(near) == 1


def test_lora_on_fused_experts_is_read_into_the_ledger(tmp_path: Path) -> None:
    """PEFT's target_parameters, nested ParamWrappers on one experts module, are read as paths inside
    a layer; each step's performed FLOPs (the merges W + A@B included) equal FlopCounterMode's."""
    from peft import LoraConfig, get_peft_model

    from tiny_models import build_model, config_dict
    from tuneproof.runs.trainer import lora_of

    params = ["mlp.experts.gate_up_proj", "down_proj"]
    model = build_model(config_dict("qwen3_moe", pad_token_id=0))  # experts eager: the counter sees them
    model = get_peft_model(
        model, LoraConfig(r=2, target_modules=["q_proj"], target_parameters=params, lora_dropout=0.0)
    )
    found = lora_of(model)
    assert (found.rank, found.targets, found.parameters) == (
        2,
        ("self_attn.q_proj",),
        ("mlp.experts.down_proj", "mlp.experts.gate_up_proj"),
    )
    ours, counter = TuneproofCallback(), CountEachStep()
    trainer = _trainer(tmp_path, 2, False, [counter, ours], model=model, grad_ckpt=True)
    trainer.train()
    assert ours._run is not None and ours._run.step.lora_target_parameters == found.parameters
    assert len(ours.history) == len(counter.counts) == 3
    for step, counted in zip(ours.history, counter.counts, strict=True):
        assert abs(step.performed / counted - 1) < TOL, (step, counted)


def test_widths_given_up_front_are_priced_at_train_begin(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, 1, True, [])
    widths = trainer.train_dataset and sorted({len(r["input_ids"]) for r in trainer.train_dataset.rows})
    callback = TuneproofCallback(peak_tflops=1.0, widths=widths)
    trainer.add_callback(callback)
    trainer.train()
    assert callback._run is not None
    memo = callback._run.ledger.performed[False].memo
    assert set(widths) - {1} <= set(memo) or callback._run.ledger.performed[False].fitted


def test_the_padding_warning_starts_just_above_ten_percent() -> None:
    from tuneproof.train.advice import StepFlops, first_step_warnings

    run: Any = None  # no micro-batches given: only the padding rule runs

    def warned(tokens: int) -> bool:
        step = StepFlops(
            step=1, intended=1.0, performed=1.0, seconds=1.0, tokens=tokens, slots=1000, micro_batches=0
        )
        return any("padding" in line for line in first_step_warnings(run, step, []))

    assert not warned(900)  # exactly 10 %: not above it
    assert warned(899)


def test_the_typical_micro_batch_is_a_real_one_at_the_median_width(tmp_path: Path) -> None:
    ours = TuneproofCallback()
    assert ours.typical_micro_batch() is None  # nothing seen yet
    trainer = _trainer(tmp_path, 4, False, [ours])
    seen: list[tuple[int, list[int]]] = []

    def record(module, args, kwargs):  # type: ignore[no-untyped-def]
        if module.training:
            seen.append((int(kwargs["input_ids"].shape[1]), kwargs["attention_mask"].sum(1).tolist()))

    trainer.model.get_base_model().register_forward_pre_hook(record, with_kwargs=True)
    trainer.train()
    report = ours.typical_micro_batch()
    widths = sorted(w for w, _ in seen)
    assert len(set(widths)) > 2  # padded batches: the widths differ, so the median means something
    assert report.run.seq_len == widths[(len(widths) - 1) // 2]
    assert list(report.run.lengths) == next(rows for w, rows in seen if w == report.run.seq_len)
    assert report.run.lora_rank == 4 and report.run.attn == "eager"


def _tiny_run() -> Any:
    from tuneproof.arch import resolve
    from tuneproof.runs.step import Step
    from tuneproof.train.read_run import CallbackState

    shape = resolve("tiny").shape  # sliding window 128, global layers every third
    step = Step(seq_len=1, attn="sdpa", mode="lora", lora_rank=16, lora_targets=("all-linear",))
    return CallbackState(
        shape=shape, step=step, peak_tflops=None, peak_source="", ledger=MicroBatchLedger(shape, step)
    )


def test_the_attention_excess_share_counts_dense_windows_and_lost_causality() -> None:
    from tuneproof.train.advice import _attention_excess_share

    run = _tiny_run()
    # inside the window, unpadded: causal; past the window: the sliding square; one pad token: globals
    # lose is_causal
    assert _attention_excess_share(run, BatchRead.padded(2, 100, (100, 100))) == 0
    dense = _attention_excess_share(run, BatchRead.padded(2, 144, (144, 144)))
    padded = _attention_excess_share(run, BatchRead.padded(2, 144, (144, 143)))
    assert 0 < dense < padded


def test_flop_advice_is_given_only_when_its_excess_is_material(monkeypatch) -> None:
    import torch

    import tuneproof.train.advice as cb

    run = _tiny_run()
    step = cb.StepFlops(
        step=1, intended=1.0, performed=1.0, seconds=1.0, tokens=287, slots=288, micro_batches=1
    )
    pending = [BatchRead.padded(2, 144, (144, 143))]
    lines = cb.first_step_warnings(run, step, pending)
    cpu_only = "" if torch.cuda.is_available() else " on a CUDA device (it has no backward on the CPU)"
    assert any(f"use flex_attention{cpu_only}:" in x for x in lines)
    assert any("bucket to avoid padding" in x for x in lines)
    assert all("% of the micro-batch's FLOPs are attention excess" in x for x in lines)
    monkeypatch.setattr(cb, "SLOW_PATH_WARN", 0.99)  # a model where attention is a sliver of the step
    assert cb.first_step_warnings(run, step, pending) == []


def test_the_padding_warning_names_its_source_the_collator_or_the_length_spread() -> None:
    """Padding past every row of a micro-batch is the collator's multiple (Axolotl pads to 64): bucketing
    cannot remove it, and the warning says so; the spread inside micro-batches is what bucketing fixes."""

    from tuneproof.flops.microbatch import StepFlops
    from tuneproof.train.advice import padding_line

    def step(batches: list[tuple[int, int, list[int]]]) -> tuple[StepFlops, list]:
        tokens = sum(sum(rows) for _, _, rows in batches)
        slots = sum(b * w for b, w, _ in batches)
        pending = [BatchRead.padded(b, w, tuple(rows)) for b, w, rows in batches]
        return StepFlops(
            step=1,
            intended=0.0,
            performed=0.0,
            seconds=1.0,
            tokens=tokens,
            slots=slots,
            micro_batches=len(batches),
        ), pending

    collator = padding_line(*step([(2, 128, [60, 64]), (2, 128, [70, 72])]), bucketed=True)
    assert collator == (
        "48 % of the first step's token slots are padding, 47 points of it past each micro-batch's longest "
        "row: the collator pads to a multiple (pad_to_multiple_of; Axolotl pads to 64): lower the multiple, "
        "or pack"
    )
    spread = step([(2, 64, [64, 10])])
    assert padding_line(*spread, bucketed=False) == (
        "42 % of the first step's token slots are padding: bucket by length "
        "(tuneproof.train.bucketing.use_bucketing) or pack"
    )
    assert padding_line(*spread, bucketed=True) == (
        "42 % of the first step's token slots are padding although the batches are bucketed: narrower "
        "buckets, or pack"
    )
    assert padding_line(*step([(2, 64, [64, 60])]), bucketed=False) is None  # 3 %: below the warning
    both = step([(2, 192, [8, 150])])  # a spread of 8/150, padded to 192 (a multiple of 64)
    assert padding_line(*both, bucketed=False) == (
        "59 % of the first step's token slots are padding: bucket by length "
        "(tuneproof.train.bucketing.use_bucketing) or pack; 22 points of it past each micro-batch's longest "
        "row: the collator pads to a multiple (pad_to_multiple_of; Axolotl pads to 64)"
    )
    no_mask = (
        StepFlops(step=1, intended=0.0, performed=0.0, seconds=1.0, tokens=100, slots=128, micro_batches=1),
        [BatchRead.padded(2, 64)],
    )  # every row full
    assert padding_line(*no_mask, bucketed=False) == (
        "22 % of the first step's token slots are padding: bucket by length "
        "(tuneproof.train.bucketing.use_bucketing) or pack"
    )


def test_padding_the_collator_adds_gets_no_advice_to_bucket() -> None:
    """The slow-path warning's "bucket to avoid padding" is left out where the padding is past every row
    (the collator's multiple): bucketing would not remove it."""

    from tuneproof.attention.dispatch import BUCKET_ADVICE
    from tuneproof.flops.microbatch import StepFlops
    from tuneproof.train.advice import first_step_warnings

    run = _tiny_run()
    rows = [60, 62]  # one length spread of 2, padded to 128 by a multiple-of-64 collator
    step = StepFlops(
        step=1, intended=0.0, performed=0.0, seconds=1.0, tokens=sum(rows), slots=2 * 128, micro_batches=1
    )
    lines = first_step_warnings(run, step, [BatchRead.padded(2, 128, tuple(rows))])
    assert any("past each micro-batch's longest row" in x for x in lines)
    assert not any(BUCKET_ADVICE in x for x in lines), lines
    spread = StepFlops(
        step=1, intended=0.0, performed=0.0, seconds=1.0, tokens=128 + 20, slots=2 * 128, micro_batches=1
    )  # the same width, one row of 20: a spread
    lines = first_step_warnings(run, spread, [BatchRead.padded(2, 128, (128, 20))])
    assert any(BUCKET_ADVICE in x for x in lines), lines


@pytest.mark.parametrize("attn", ["eager", "sdpa", "flash_attention_2", "flex_attention"])
def test_the_packed_row_shortcuts_equal_the_ledger_on_whole_packed_batches(attn: str) -> None:
    """A full packed row is priced as a padded row of its width (eager, SDPA: the full square) or as
    its documents alone (flash varlen) only where that reproduces the ledger; flex keeps the ledger."""
    from tuneproof.arch import resolve
    from tuneproof.flops import Step, flop_report
    from tuneproof.runs.step import Rows

    expected = {"eager": "square", "sdpa": "square", "flash_attention_2": "documents"}
    for config in ("tiny", "examples/gemma4-26b-a4b-like/config.json"):
        shape = resolve(config).shape
        step = Step(seq_len=1, attn=attn, mode="lora", lora_rank=8, grad_ckpt=True)
        ledger = MicroBatchLedger(shape, step)
        rng = random.Random(0)
        for _ in range(8):
            docs = tuple(rng.randint(1, 300) for _ in range(rng.randint(2, 6)))
            rows = Rows(sum(docs), (docs,) * 2)
            read = BatchRead(
                batch=2,
                width=rows.width,
                docs=rows.docs,
                seen=rows,
                documents_from="position_ids restarts",
                padding_from=None,
                apart=True,
            )
            direct = flop_report(shape, replace(step, seq_len=rows.width, batch=2, documents=rows.docs))
            assert ledger.micro_batch(read) == pytest.approx(
                (direct.intended.total, direct.performed.total), rel=1e-9
            )
        assert ledger.packed_rule() == expected.get(attn, "ledger")


def test_a_compiled_run_is_read_as_one_and_priced_with_every_layer_masked() -> None:
    """TrainingArguments(torch_compile=True), or a model handed over compiled: transformers masks every
    SDPA layer under compile (tests/attention/test_compiled_masks.py shows it), so the step is priced
    masked; the config's attention dropout is read for the dispatch advice."""
    import types

    import torch

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model
    from tuneproof.runs.batch import BatchRead
    from tuneproof.train.read_run import read_run

    model = build_model(resolve(config_dict("llama", attention_dropout=0.1)), "sdpa")
    plain = read_run(model, types.SimpleNamespace(torch_compile=False), None, None)
    compiled = read_run(model, types.SimpleNamespace(torch_compile=True), None, None)
    wrapped = read_run(torch.compile(model), types.SimpleNamespace(), None, None)
    assert not plain.step.compiled and compiled.step.compiled and wrapped.step.compiled
    assert compiled.dropout == 0.1
    read = BatchRead.padded(2, 256)
    assert compiled.ledger.micro_batch(read)[1] > plain.ledger.micro_batch(read)[1]
    assert compiled.ledger.micro_batch(read)[0] == plain.ledger.micro_batch(read)[0]
