"""An observer never stops what it observes: a real Trainer run completes whatever attention
implementation the model names and whichever of the callback's parts fails, each failure said once in a
line that names the part turned off; the parts that did not fail keep logging."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback

from trainers import tiny_trainer
from tuneproof.runs.implementations import implementation
from tuneproof.train import guard
from tuneproof.train.callback import TuneproofCallback

pytestmark = pytest.mark.slow  # a real Trainer: left out of mutation runs


class Logs(TrainerCallback):
    """Every logs dict the Trainer dispatched."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):  # type: ignore[no-untyped-def]
        self.seen.append(dict(logs or {}))

    def logged(self) -> set[str]:
        return {k for logs in self.seen if "loss" in logs for k in logs}


def _run(tmp_path: Path, callback: TuneproofCallback, model: Any = None) -> tuple[Logs, list[str]]:
    """A 3-step Trainer run with `callback`; the logs and tuneproof's warnings."""
    logs = Logs()
    trainer = tiny_trainer(tmp_path, 1, False, [callback, logs], model=model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    assert trainer.state.global_step == 3  # the run went to its end
    said = [str(w.message) for w in caught if str(w.message).startswith("tuneproof:")]
    return logs, said


# --- every attention implementation transformers 5.24 accepts -------------------------------------------

# name -> the path it prices as (unknown: no rule models it)
IMPLEMENTATIONS = {
    "flash_attention_3": "flash_attention_2",
    "flash_attention_4": "flash_attention_2",
    "kernels-community/flash-attn3": "flash_attention_2",
    "kernels-community/vllm-flash-attn3@main:flash_attn_varlen_func": "flash_attention_2",
    "paged|sdpa": "sdpa",
    "paged|flash_attention_2": "flash_attention_2",
    "paged|eager": "eager",
    "sdpa_paged": "unknown",
    "kernels-community/sage-attention": "unknown",
    "doge_flex_attention": "unknown",  # a model's own registered name
}


def test_each_implementation_maps_to_the_path_it_runs_or_to_unknown() -> None:
    for name, expected in IMPLEMENTATIONS.items():
        found = implementation(name)
        assert found.path == expected, name
        assert found.note, name  # how it was mapped is said
    assert implementation("sdpa").note is None and implementation(None).path == "sdpa"
    assert implementation(3).path == "unknown"  # type: ignore[arg-type]  # a config holding no name


def _named(monkeypatch: pytest.MonkeyPatch, name: str) -> Any:
    """The tiny LoRA model with `config._attn_implementation = name`, run by SDPA under that name (the CPU
    has no flash kernel; what the callback reads is the name)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    from tiny_models import config_dict
    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    for key in {name, name.removeprefix("paged|")}:  # transformers drops the prefix itself
        monkeypatch.setitem(AttentionInterface._global_mapping, key, sdpa_attention_forward)
        monkeypatch.setitem(AttentionMaskInterface._global_mapping, key, sdpa_mask)
    model = build_model(resolve(config_dict("llama", pad_token_id=0)), "sdpa")
    model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    model.config._attn_implementation = name
    return model


@pytest.mark.parametrize("name", list(IMPLEMENTATIONS))
def test_a_trainer_run_completes_under_every_attention_implementation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    callback = TuneproofCallback(peak_tflops=1.0)
    logs, said = _run(tmp_path, callback, _named(monkeypatch, name))
    assert callback._run is not None and callback._run.attn == IMPLEMENTATIONS[name]
    assert not callback.parts.off, callback.parts.off
    assert "tuneproof/tflops_intended" in logs.logged() and "tuneproof/mfu_intended" in logs.logged()
    if IMPLEMENTATIONS[name] == "unknown":  # never priced as flash: no performed number at all
        assert not any(k.endswith("_performed") for k in logs.logged())
        assert any(f"{name} is not" in s or f"{name} is a hub kernel" in s for s in said), said
    else:
        assert "tuneproof/tflops_performed" in logs.logged()


# --- a part that fails turns itself off, and only itself --------------------------------------------------


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("planted")


# (what is made to fail, the part that must turn off, a metric that must still be logged or None)
PLANTED = [
    ("tuneproof.train.callback.read_run", guard.READING, None),
    ("tuneproof.train.callback.read_batch", guard.FLOPS, "tuneproof/trained_tokens"),
    ("tuneproof.train.callback.price_step", guard.FLOPS, "tuneproof/trained_tokens"),
    ("tuneproof.train.callback.trained", guard.TOKENS, "tuneproof/tflops_performed"),
    ("tuneproof.train.callback.eos_masked", guard.EOS, "tuneproof/trained_tokens"),
    (
        "tuneproof.train.trained_tokens.AccumulationCheck.micro",
        guard.ACCUMULATION,
        "tuneproof/trained_tokens",
    ),
    (
        "tuneproof.train.trained_tokens.AccumulationCheck.judge",
        guard.ACCUMULATION,
        "tuneproof/tflops_performed",
    ),
    ("tuneproof.train.callback.first_step_warnings", guard.ADVICE, "tuneproof/tflops_performed"),
    ("tuneproof.train.callback.TuneproofCallback._check_isolation", guard.ISOLATION, "tuneproof/padding"),
    ("tuneproof.train.callback._frames_compiled", guard.RECOMPILES, "tuneproof/tflops_performed"),
    ("tuneproof.train.callback.TuneproofCallback._memory", guard.MEMORY, "tuneproof/tflops_performed"),
    ("tuneproof.train.callback._log_first", guard.ORDER, "tuneproof/tflops_performed"),
    ("tuneproof.train.callback._update_logs", guard.LOGGING, None),
    ("tuneproof.train.callback.adapter_health", guard.HEALTH, "tuneproof/tflops_performed"),
    ("tuneproof.train.callback.write_base_fingerprint", guard.FINGERPRINT, "tuneproof/tflops_performed"),
]


@pytest.mark.parametrize(
    ("target", "part", "still"), PLANTED, ids=[p[1] + ":" + p[0].rpartition(".")[2] for p in PLANTED]
)
def test_a_failing_part_turns_itself_off_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, part: str, still: str | None
) -> None:
    monkeypatch.setattr(target, _boom)
    callback = TuneproofCallback(peak_tflops=1.0, check_isolation=part == guard.ISOLATION)
    logs, said = _run(tmp_path, callback)
    assert list(callback.parts.off) == [part], callback.parts.off
    turned_off = [s for s in said if "turned off" in s]
    assert turned_off == [
        f"tuneproof: {part} turned off after an unexpected error (RuntimeError: planted); the training run "
        "goes on"
    ]
    if still is not None:
        assert still in logs.logged(), (still, logs.logged())


def test_a_warning_filter_that_raises_never_reaches_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-W error` turns warnings into exceptions: the callback's lines then go to stderr."""
    monkeypatch.setattr("tuneproof.train.callback.price_step", _boom)
    callback, logs = TuneproofCallback(peak_tflops=1.0), Logs()
    trainer = tiny_trainer(tmp_path, 1, False, [callback, logs])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer.train()
    assert trainer.state.global_step == 3
    assert f"tuneproof: {guard.FLOPS} turned off" in capsys.readouterr().err
