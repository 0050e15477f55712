"""The callback's memory line: the ledger's prediction for the run as the callback reads it, and the
warning when the CUDA allocator's peak parts from it by more than 10 %."""

from __future__ import annotations

import types
from dataclasses import replace

import pytest

from tiny_models import build_model, config_dict
from tuneproof.memory.step import step_memory
from tuneproof.runs.step import Precision, Training
from tuneproof.train.memory_check import PART, memory_metrics, predicted_peak
from tuneproof.train.read_run import read_run


def test_the_prediction_is_the_ledger_for_the_widest_micro_batch_seen() -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(build_model(config_dict("llama")), LoraConfig(r=4, target_modules="all-linear"))
    args = types.SimpleNamespace(bf16=True, optim="adamw_torch", gradient_accumulation_steps=4)
    run = read_run(model, args, None, None)
    assert predicted_peak(run) is None  # before any step
    run.widths_seen = {64: [3, types.SimpleNamespace(batch=2)], 256: [1, types.SimpleNamespace(batch=4)]}
    got, what = predicted_peak(run)
    want = step_memory(
        run.resolved,
        replace(
            run.step, seq_len=256, batch=4, precision=Precision(dtype="fp32", autocast="bf16"),
            training=Training(optimizer_impl="foreach", grad_accum=4),
        ),
    ).peak.peak_bytes  # fmt: skip
    assert (got, what) == (want, "B=4 x T=256")


def test_a_peak_that_parts_from_the_prediction_is_warned_about() -> None:
    metrics, warning = memory_metrics(1_050, (1_000, "B=1 x T=8"))
    assert metrics == {"memory_peak_measured": 1_050.0, "memory_peak_predicted": 1_000.0} and warning is None
    _, warning = memory_metrics(round(1_000 * (1 + PART)) + 50, (1_000, "B=1 x T=8"))
    assert warning is not None and "(+15%)" in warning and "B=1 x T=8" in warning
    assert memory_metrics(7, None) == ({"memory_peak_measured": 7.0}, None)


@pytest.mark.parametrize(
    ("optim", "impl"),
    [("adamw_torch_fused", "fused"), ("adamw_torch", "foreach"), ("adamw_bnb_8bit", "fused")],
)
def test_the_trainers_optimizer_names_its_implementation(optim: str, impl: str) -> None:
    """The Trainer's `optim` (transformers' OptimizerNames, a str enum: `str()` of it is its member's name,
    so the default read as foreach before issue 47) is read once, as preflight reads a YAML's."""
    from transformers import TrainingArguments

    from tuneproof.runs.trainer import from_trainer

    model = build_model(config_dict("llama"))
    args = TrainingArguments(output_dir="/tmp/unused", optim=optim, use_cpu=True, report_to=[])
    assert from_trainer(model, args).step().training.optimizer_impl == impl
