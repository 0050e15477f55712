"""Build real transformers models from configs (random weights, never downloaded) for measuring."""

from __future__ import annotations

import re
from typing import Any

from tuneproof.arch.shape import ModelShape
from tuneproof.errors import TuneproofError

MOE_TYPES = {"qwen3_moe", "qwen2_moe", "mixtral", "gemma4_text", "gpt_oss"}


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
