"""The bytes that live through a step, against PyTorch's own MemTracker (Parameter, Gradient and
Optstate categories) after one AdamW or SGD step of a tiny random model in fp32 on the CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from tuneproof.arch import resolve
from tuneproof.memory import state_bytes
from tuneproof.runs.step import Step

SMALL = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 512}  # fmt: skip
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen3": {"head_dim": 64},
    "gemma3_text": {
        "head_dim": 64,
        "sliding_window": 64,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "qwen3_moe": {"head_dim": 64, "moe_intermediate_size": 128, "num_experts": 8, "num_experts_per_tok": 2},
}


class _NoHook:
    def remove(self) -> None:
        pass


@contextlib.contextmanager
def _frozen_params_tolerated() -> Iterator[None]:
    """MemTracker registers a gradient hook on every parameter, and torch refuses one on a frozen
    parameter (LoRA's base): a no-op handle for those, a real hook for the rest."""
    names = ("register_hook", "register_post_accumulate_grad_hook")
    saved = {n: getattr(torch.Tensor, n) for n in names}

    def tolerant(orig: Any) -> Any:
        return lambda self, hook: orig(self, hook) if self.requires_grad else _NoHook()

    try:
        for n in names:
            setattr(torch.Tensor, n, tolerant(saved[n]))
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)


def _tracked_step(family: str, mode: str, optimizer: str) -> tuple[dict[str, int], Any, Any]:
    """MemTracker's current bytes per category after one step (gradients still held), the model and
    its config."""
    from torch.distributed._tools.mem_tracker import MemTracker
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(family, **SMALL, **FAMILIES[family])
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float().train()
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
        )
    params = [p for p in model.parameters() if p.requires_grad]
    opt: torch.optim.Optimizer = (
        torch.optim.AdamW(params, lr=1e-4) if optimizer == "adamw" else torch.optim.SGD(params, 1e-3, 0.9)
    )
    ids = torch.randint(0, SMALL["vocab_size"], (2, 32))
    with _frozen_params_tolerated():
        tracker = MemTracker()
        tracker.track_external(model, opt)
        with tracker:
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            snap = tracker.get_tracker_snapshot()
    (per_device,) = snap.values()
    return {str(k.value) if hasattr(k, "value") else str(k): v for k, v in per_device.items()}, model, config


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize(
    ("mode", "optimizer"), [("full", "adamw"), ("lora", "adamw"), ("full", "sgd_momentum")]
)
def test_weights_gradients_and_optimizer_states_match_memtracker(
    family: str, mode: str, optimizer: str
) -> None:
    tracked, model, config = _tracked_step(family, mode, "adamw" if optimizer == "adamw" else "sgd")
    run = Step(
        seq_len=32, batch=2, mode=mode, lora_rank=8, lora_targets=("q_proj", "k_proj", "v_proj", "o_proj")
    )
    got = state_bytes(resolve(config).shape, run, "fp32", optimizer, step_on_device=True)
    base_weights = tracked["Parameter"] - (got.adapters if mode == "lora" else 0)
    # norms and biases are not in the shape: under 1 % of these tiny models' weights
    assert got.weights == pytest.approx(base_weights, rel=0.01)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if mode == "lora":  # PEFT's own adapters, counted exactly
        assert got.trainable == trainable
        assert got.gradients == tracked["Gradient"] and got.optimizer == tracked["Optstate"]
        assert tracked["Parameter"] - base_weights == got.adapters
    else:
        assert got.trainable == pytest.approx(trainable, rel=0.01)
        assert got.gradients == pytest.approx(tracked["Gradient"], rel=0.01)
        assert got.optimizer == pytest.approx(tracked["Optstate"], rel=0.01)


def test_an_unknown_optimizer_is_refused_with_the_known_ones() -> None:
    from tuneproof.core.errors import TuneproofError

    with pytest.raises(TuneproofError, match="use one of adamw, adamw_amsgrad, sgd, sgd_momentum"):
        state_bytes(resolve("tiny").shape, Step(seq_len=8), "bf16", "lion")


def test_bf16_full_fine_tuning_and_lora_by_hand() -> None:
    """The tiny Gemma-4-style model: weights at 2 bytes, AdamW's two moments in the parameter's dtype;
    LoRA's adapters in fp32 whatever the base (PEFT's upcast)."""
    shape = resolve("tiny").shape
    full = state_bytes(shape, Step(seq_len=8), "bf16")
    assert full.gradients == full.trainable * 2 and full.optimizer == 2 * full.gradients
    lora = state_bytes(shape, Step(seq_len=8, mode="lora", lora_rank=4), "bf16")
    assert lora.weights == full.weights and lora.adapters == lora.trainable * 4
    assert lora.optimizer == 2 * lora.adapters and lora.gradients == lora.adapters
    assert "per-layer embedding tables" in lora.not_counted  # Gemma 4's per-layer inputs


@pytest.mark.parametrize(
    ("family", "lora"),
    [
        # PEFT 0.21's all-linear on a MoE: expert and router target_parameters, gate_up_proj at twice the rank
        ("qwen3_moe", {"r": 4, "target_modules": "all-linear"}),
        ("llama", {"r": 4, "target_modules": ["q_proj", "v_proj"], "modules_to_save": ["lm_head"]}),
        ("llama", {"r": 8, "target_modules": "all-linear", "rank_pattern": {"down_proj": 2}}),
    ],
)
def test_the_adapters_peft_created_are_counted_exactly(family: str, lora: dict[str, Any]) -> None:
    """The run as the callback reads it from the PEFT model (`train.read_run`): the trainable parameters
    and their bytes (adapters in fp32, a module saved whole in the model's dtype) equal PEFT's own."""
    import types
    import warnings

    from peft import LoraConfig, get_peft_model

    from tiny_models import build_model, config_dict
    from tuneproof.train.read_run import read_run

    model = build_model(config_dict(family, pad_token_id=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PEFT's own rank_pattern warning on some MoE layers
        model = get_peft_model(model, LoraConfig(lora_dropout=0.0, **lora))
    run = read_run(model, types.SimpleNamespace(), None, None)
    got = state_bytes(run.shape, run.step, "fp32")
    trained = [p for p in model.parameters() if p.requires_grad]
    assert got.trainable == sum(p.numel() for p in trained)
    assert got.tensors == len(trained)
    assert got.gradients == sum(p.numel() * p.element_size() for p in trained)
