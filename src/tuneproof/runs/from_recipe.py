"""A tuneproof recipe TOML as a RunConfig: what `tuneproof train` will run (the bucketing sampler, no
packing, attention auto: flex_attention on CUDA, sdpa on the CPU; LoRA on the recipe's targets)."""

from __future__ import annotations

from pathlib import Path

from tuneproof.runs.axolotl import DatasetRef, RunConfig


def from_recipe(path: Path) -> RunConfig:
    from tuneproof.runs.recipe import TINY, read_recipe

    r = read_recipe(path)
    run = RunConfig(str(path), "recipe", r.model.name, r.data.max_length)
    run.micro_batch, run.grad_accum, run.epochs = r.optim.micro_batch, r.optim.grad_accum, r.optim.epochs
    run.pad_to_seq_len = False  # the bucketing sampler pads each batch to its bucket's width
    attention = r.run.attention
    run.attn, run.auto_attention = (None, True) if attention == "auto" else (attention, False)
    run.seq_len_key = "data.max_length"
    run.grad_ckpt = r.optim.grad_ckpt
    run.adapter, run.lora_r = "lora", r.lora.r
    if r.lora.targets == "all-linear":
        run.target_linear = True
    else:
        run.targets = tuple(r.lora.targets) if isinstance(r.lora.targets, list) else (str(r.lora.targets),)
    run.target_parameters = tuple(r.lora.target_parameters)
    if r.data.path != TINY:
        p = Path(r.data.path)
        run.datasets = (DatasetRef(r.data.path, "text", p if p.exists() else None, r.data.text_field, True),)
    run.notes.append(
        "read as a tuneproof train recipe: attention auto is flex_attention on CUDA, sdpa on the CPU"
    )
    return run
