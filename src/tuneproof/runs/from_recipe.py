"""A tuneproof recipe TOML as a Run: what `tuneproof train` will run (the bucketing sampler, no
packing, attention auto: flex_attention on CUDA, sdpa on the CPU; LoRA on the recipe's targets)."""

from __future__ import annotations

from pathlib import Path

from tuneproof.runs.run import DatasetRef, LabelOptions, Run


def from_recipe(path: Path) -> Run:
    from tuneproof.runs.recipe import TINY, read_recipe

    r = read_recipe(path)
    attention = r.run.attention
    datasets: tuple[DatasetRef, ...] = ()
    if r.data.path != TINY:
        p = Path(r.data.path)
        datasets = (
            DatasetRef(
                path=r.data.path,
                kind="text",
                local=p if p.exists() else None,
                field=r.data.text_field,
                meant_local=True,
            ),
        )
    linear = r.lora.targets == "all-linear"
    return Run(
        source=str(path),
        kind="recipe",
        base_model=r.model.name,
        seq_len=r.data.max_length,
        micro_batch=r.optim.micro_batch,
        grad_accum=r.optim.grad_accum,
        epochs=r.optim.epochs,
        pad_to_seq_len=False,  # the bucketing sampler pads each batch to its bucket's width
        attn=None if attention == "auto" else attention,
        auto_attention=attention == "auto",
        seq_len_key="data.max_length",
        grad_ckpt=r.optim.grad_ckpt,
        adapter="lora",
        lora_r=r.lora.r,
        target_linear=linear,
        targets=()
        if linear
        else tuple(r.lora.targets)
        if isinstance(r.lora.targets, list)
        else (str(r.lora.targets),),
        target_parameters=tuple(r.lora.target_parameters),
        datasets=datasets,
        labels=LabelOptions(trainer="trl", assistant_only_loss=r.data.assistant_only_loss),
        notes=(
            "read as a tuneproof train recipe: attention auto is flex_attention on CUDA, sdpa on the CPU",
        ),
    )
