"""Tiny bases and PEFT adapters on disk for the shipping tests: real transformers models saved with
save_pretrained, real PEFT adapters saved with save_pretrained, with chosen LoRA factors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers.utils import logging as hf_logging

from tiny_models import TINY

hf_logging.disable_progress_bar()  # save_pretrained's shard bar would land in captured stderr

# target_parameters per MoE family (the fused expert parameters' paths relative to a layer)
EXPERT_PARAMS = {
    "qwen3_moe": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    "qwen2_moe": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    "mixtral": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    "gpt_oss": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
    "gemma4_text": ["experts.gate_up_proj", "experts.down_proj"],
}
FAMILIES = sorted(TINY)


def model(family: str, seed: int = 0, dtype: torch.dtype = torch.float32) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **TINY[family])).to(dtype)


def save(m: Any, folder: Path, **kwargs: Any) -> Path:
    m.save_pretrained(folder, **kwargs)
    return folder


def adapter(
    base_model: Any,
    folder: Path,
    *,
    experts: bool = True,
    fill: Callable[[str, torch.Tensor], None] | None = None,
    seed: int = 1,
    **lora: Any,
) -> Any:
    """A PEFT LoRA on q_proj and o_proj (and the fused experts of an MoE family), B drawn at random so
    that it looks trained; `fill(name, param)` edits factors afterwards. Returns the PEFT model."""
    from peft import LoraConfig, get_peft_model

    family = base_model.config.model_type
    options: dict[str, Any] = dict(r=2, target_modules=["q_proj", "o_proj"], lora_dropout=0.0)
    if experts and family in EXPERT_PARAMS:
        options["target_parameters"] = EXPERT_PARAMS[family]
    options.update(lora)
    peft_model = get_peft_model(base_model, LoraConfig(**options))
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "lora_embedding_A" in name:
                p.normal_(0, 0.1)
            if fill is not None and "lora_" in name:
                fill(name, p)
    peft_model.save_pretrained(folder)
    return peft_model


def tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under a folder, by relative path: for 'inputs untouched' checks."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
