"""Build real transformers models from configs (random weights, never downloaded) for measuring.

Nothing here touches global state: weights are initialised under a forked RNG, so building a model
leaves the caller's `torch` random stream where it was.
"""

from __future__ import annotations

import re
from typing import Any

from tuneproof.arch import ResolvedModel
from tuneproof.arch.shape import ModelShape
from tuneproof.arch.targets import LoraTargets
from tuneproof.attention.paths import path
from tuneproof.core.dtypes import BY_SHORT, MODEL_DTYPES, torch_dtype
from tuneproof.core.errors import TuneproofError

BYTES = {s: BY_SHORT[s].bytes for s in MODEL_DTYPES}
# Building needs the weights once in fp32 (initialisation) plus working room for a training step.
HEADROOM = 3.0


def parameter_estimate(model: ResolvedModel) -> int:
    """Parameters of the model a config describes: every GEMM weight (all experts, the LM head
    counted once) plus the input embeddings (and Gemma 4's per-layer embeddings). Norms excluded."""
    shape, cfg = model.shape, model.config
    embeddings = shape.vocab_size * shape.hidden_size
    per_layer = (
        getattr(cfg, "vocab_size_per_layer_input", 0)
        * (getattr(cfg, "hidden_size_per_layer_input", 0) or 0)
        * shape.num_layers
    )
    # the LM head is one of the GEMMs; tied, it is the input embedding matrix itself
    return shape.parameter_count() + (0 if shape.tie_word_embeddings else embeddings) + per_layer


def available_memory_bytes() -> int | None:
    """Memory a new allocation can get on this machine: MemAvailable from /proc/meminfo (free plus
    reclaimable cache), else total physical memory, else None (unknown: no check)."""
    import os
    from pathlib import Path

    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def score_bytes(shape: ModelShape, attn: str, batch: int, width: int, training: bool) -> tuple[int, str]:
    """Bytes of the width-squared tensors one step holds at once, and what they are (the attention
    path's own estimate; a backward keeps every layer run's alive, a looped layer's once per run, a
    forward one layer's)."""
    heads = max(layer.attention.num_heads for layer in shape.layers)
    return path(attn).square_bytes(batch, width, heads, len(shape.runs) if training else 1)


def check_fits_on_cpu(
    model: ResolvedModel, *, attn: str = "sdpa", batch: int = 1, width: int = 0, training: bool = False
) -> None:
    """Refuse to build or step a model this machine cannot hold, before trying (and swapping or dying):
    ~3x the fp32 weights to build, plus the width-squared tensors of the step (`score_bytes`)."""
    params = parameter_estimate(model)
    weights = params * BYTES["fp32"] * HEADROOM
    scores, what = score_bytes(model.shape, attn, batch, width, training) if width else (0, "")
    have = available_memory_bytes()
    if have is None:
        return
    if weights > have:
        raise TuneproofError(
            f"{model.shape.model_type} with ~{params / 1e9:.1f}B parameters needs ~{weights / 2**30:.0f} GiB "
            f"to build and step on the CPU, {have / 2**30:.0f} GiB are available",
            "use a smaller config (e.g. fewer layers) or a CUDA device",
        )
    if weights + scores > have:
        raise TuneproofError(
            f"width {width} needs ~{(weights + scores) / 2**30:.1f} GiB on the CPU, "
            f"{have / 2**30:.1f} GiB are available: {what}",
            "use smaller widths or batch, or another attention path",
        )


def check_positions(model: ResolvedModel, widths: list[int] | tuple[int, ...], field: str = "widths") -> None:
    """Refuse widths the model cannot place (`ResolvedModel.positions_problem`): a step must run them."""
    problem = model.positions_problem(max(widths), f"{{{field}}}")
    if problem is not None:
        raise TuneproofError(problem, f"use widths up to {model.max_positions}", fields=(field,))


def build_model(
    model: ResolvedModel,
    attn: str,
    *,
    device: str = "cpu",
    dtype: str = "fp32",
    eager_experts: bool = False,
    seed: int = 0,
) -> Any:
    """A causal LM with random weights drawn from `seed` (the global RNG is left untouched).
    `eager_experts` runs MoE experts as a Python loop of GEMMs (what FlopCounterMode can see); the
    default is transformers' own choice (grouped_mm)."""
    import copy

    import torch

    from tuneproof.arch.construct import causal_lm_from_config

    if device == "cpu":
        check_fits_on_cpu(model)
    # transformers writes the attention choice into the config object: never share it between models
    text_config = copy.deepcopy(model.config)
    kwargs: dict[str, Any] = {"attn_implementation": attn}
    if eager_experts and model.shape.has_experts:
        kwargs["experts_implementation"] = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            built = causal_lm_from_config(text_config, **kwargs)
        except ValueError as e:
            raise TuneproofError(
                f"transformers refuses attn {attn!r} for {text_config.model_type}: {str(e).splitlines()[0]}",
                "pick another attention path",
            ) from None
    return built.to(device=device, dtype=torch_dtype(dtype))


def peft_target_regex(targets: list[str]) -> str:
    """A PEFT target_modules regex (full match on module names) for exactly these module paths.

    Plain names or "all-linear" are avoided on purpose: recent PEFT releases also wrap MoE routers
    and fused expert parameters whose names collide (down_proj), which the FLOP ledger does not model.
    """
    return r"(?:.*\.)?(?:" + "|".join(re.escape(t) for t in targets) + ")"


def lora_targets(shape: ModelShape) -> list[str]:
    """Every nn.Linear LoRA adapts under "all-linear" and runs with (not the LM head, nor the modules
    PEFT refuses on Mamba models, nor a router whose wrapped forward fails), as module paths relative to
    a layer (or the model)."""
    from tuneproof.arch.targets import LoraTargets, adaptation

    found = adaptation(shape, LoraTargets(modules=("all-linear",)))
    broken = {lin.name for lin in shape.linears if lin.wrap_fails}
    return sorted(
        {name for (_, name), place in found.places.items() if place.how == "module" and name not in broken}
    )


def apply_peft(model: Any, lora: LoraTargets) -> Any:
    """PEFT's LoRA of `lora` (the step's targets in PEFT's words) on `model`: what it adapts is PEFT's own
    resolution, which the ledgers' (`tuneproof.arch.targets.adaptation`) equals."""
    import warnings

    from peft import LoraConfig, get_peft_model

    config = LoraConfig(lora_dropout=0.0, **lora.peft_config())
    with warnings.catch_warnings():  # PEFT 0.21 reads transformers 5's deprecated is_gradient_checkpointing
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*rank_pattern.*did not match", category=UserWarning)
        return get_peft_model(model, config)


def apply_lora(model: Any, targets: list[str], rank: int, target_parameters: tuple[str, ...] = ()) -> Any:
    """PEFT LoRA of `rank` on exactly the nn.Linear modules `targets` (module paths) and the fused
    expert parameters `target_parameters` (PEFT's own matching: a path or its '.'-suffix)."""
    import warnings

    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        target_modules=peft_target_regex(targets) if targets else [],
        target_parameters=list(target_parameters) or None,
        lora_dropout=0.0,
    )
    with warnings.catch_warnings():  # PEFT 0.21 reads transformers 5's deprecated is_gradient_checkpointing
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)
        return get_peft_model(model, config)
