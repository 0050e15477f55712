"""Build real transformers models from configs (random weights, never downloaded) for measuring."""

from __future__ import annotations

import re
from typing import Any

from tuneproof.arch.shape import ModelShape
from tuneproof.errors import TuneproofError

MOE_TYPES = {"qwen3_moe", "qwen2_moe", "mixtral", "gemma4_text", "gpt_oss"}
BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# Building needs the weights once in fp32 (initialisation) plus working room for a training step.
HEADROOM = 3.0


def parameter_estimate(text_config: Any) -> int:
    """Parameters of the model a config describes: every GEMM weight (all experts, the LM head
    counted once) plus the input embeddings (and Gemma 4's per-layer embeddings). Norms excluded."""
    from tuneproof.arch import from_config

    shape = from_config(text_config)
    embeddings = shape.vocab_size * shape.hidden_size
    per_layer = (
        getattr(text_config, "vocab_size_per_layer_input", 0)
        * (getattr(text_config, "hidden_size_per_layer_input", 0) or 0)
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


def check_fits_on_cpu(text_config: Any) -> None:
    """Refuse to build a model this machine cannot hold, before trying (and swapping or dying)."""
    need = parameter_estimate(text_config) * BYTES["fp32"] * HEADROOM
    have = available_memory_bytes()
    if have is not None and need > have:
        raise TuneproofError(
            f"{text_config.model_type} with ~{parameter_estimate(text_config) / 1e9:.1f}B parameters needs "
            f"~{need / 2**30:.0f} GiB to build and step on the CPU, {have / 2**30:.0f} GiB are available",
            "use a smaller config (e.g. fewer layers) or --device cuda",
        )


def build_model(
    text_config: Any,
    attn: str,
    *,
    device: str = "cpu",
    dtype: str = "fp32",
    eager_experts: bool = False,
    seed: int = 0,
) -> Any:
    """A causal LM with random weights. `eager_experts` runs MoE experts as a Python loop of GEMMs
    (what FlopCounterMode can see); the default is transformers' own choice (grouped_mm)."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    if device == "cpu":
        check_fits_on_cpu(text_config)
    # transformers writes the attention choice into the config object: never share it between models
    text_config = copy.deepcopy(text_config)
    torch.manual_seed(seed)
    kwargs: dict[str, Any] = {"attn_implementation": attn}
    if eager_experts and text_config.model_type in MOE_TYPES:
        kwargs["experts_implementation"] = "eager"
    try:
        model = AutoModelForCausalLM.from_config(text_config, **kwargs)
    except ValueError as e:
        raise TuneproofError(
            f"transformers refuses attn {attn!r} for {text_config.model_type}: {str(e).splitlines()[0]}",
            "pick another --attn",
        ) from None
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    return model.to(device=device, dtype=torch_dtype)


def peft_target_regex(targets: list[str]) -> str:
    """A PEFT target_modules regex (full match on module names) for exactly these module paths.

    Plain names or "all-linear" are avoided on purpose: recent PEFT releases also wrap MoE routers
    and fused expert parameters whose names collide (down_proj), which the FLOP ledger does not model.
    """
    return r".*\.(?:" + "|".join(re.escape(t) for t in targets) + ")"


def lora_targets(shape: ModelShape) -> list[str]:
    """Every nn.Linear but the LM head, as module paths relative to a layer (or the model)."""
    return sorted({lin.name for lin in shape.linears() if lin.adaptable})


def apply_lora(model: Any, targets: list[str], rank: int) -> Any:
    from peft import LoraConfig, get_peft_model

    return get_peft_model(
        model, LoraConfig(r=rank, target_modules=peft_target_regex(targets), lora_dropout=0.0)
    )
