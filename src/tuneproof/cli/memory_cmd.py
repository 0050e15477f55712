"""`tuneproof memory`: peak bytes of one training step per component, intended vs performed, and the
fit on a card."""

from __future__ import annotations

import click

from tuneproof.cli.common import (
    command,
    config_option,
    finish,
    json_option,
    lora_options,
    step_options,
    str_list,
    target_parameters,
    warn_unused,
)


@command()
@config_option
@step_options
@click.option("--mode", default="lora", show_default=True, help="full (all weights) or lora.")
@lora_options
@click.option("--dtype", default="bf16", show_default=True, help="Weights as loaded: bf16, fp16, fp32.")
@click.option(
    "--autocast", default="bf16", show_default=True,
    help="Activations under torch.autocast (the Trainer's bf16/fp16 flag): bf16, fp16, or none.",
)  # fmt: skip
@click.option("--quant", default=None, help="Base weights by bitsandbytes (QLoRA): 8bit, 4bit, 4bit-dq.")
@click.option(
    "--optimizer", default="adamw", show_default=True,
    help="adamw, adamw_amsgrad, adamw_8bit, sgd, sgd_momentum.",
)  # fmt: skip
@click.option(
    "--optimizer-impl", default="fused", show_default=True,
    help="torch AdamW implementation: fused (HF Trainer's adamw_torch_fused), foreach, for-loop.",
)  # fmt: skip
@click.option(
    "--grad-accum", type=int, default=1, show_default=True, help="Micro-batches per optimizer step."
)
@click.option("--parallel", default="none", show_default=True, help="none, ddp, or fsdp (FSDP2): per rank.")
@click.option("--world-size", type=int, default=1, show_default=True, help="Ranks (with --parallel).")
@click.option("--gpu", default=None, help="The card to fit on: a GPU name, or auto (this device).")
@click.option(
    "--gpu-memory", type=float, default=None, help="The card's memory in GiB (a card the table lacks)."
)
@json_option
def memory(
    config: str, seq_len: int, batch: int, attn: str, padding_fraction: float, mode: str, lora_rank: int,
    lora_targets: str, lora_target_parameters: tuple[str, ...], grad_ckpt: bool, dtype: str, autocast: str,
    quant: str | None, optimizer: str, optimizer_impl: str, grad_accum: int, parallel: str, world_size: int,
    gpu: str | None, gpu_memory: float | None, json_out: bool,
) -> int:  # fmt: skip
    """Peak memory of one training step, per component; intended vs performed; the fit on a card."""
    from tuneproof.commands.memory import MemorySpec, prepare, run
    from tuneproof.core import validate
    from tuneproof.core.dtypes import LOW_PRECISION
    from tuneproof.runs.run import Run
    from tuneproof.runs.step import Precision, Training

    validate.choice("autocast", autocast, (*LOW_PRECISION, "none"))
    warn_unused(("lora_rank", "lora_targets", "lora_target_parameters"), "--mode lora", mode == "lora")
    flags = Run.of_flags(
        attn=attn, mode=mode, seq_len=seq_len, micro_batch=batch, lora_r=lora_rank,
        targets=() if lora_targets == "none" else str_list(lora_targets, "--lora-targets"),
        target_parameters=target_parameters(lora_target_parameters), grad_ckpt=grad_ckpt,
        precision=Precision(dtype=dtype, autocast=None if autocast == "none" else autocast, quant=quant),
        training=Training(optimizer=optimizer, optimizer_impl=optimizer_impl, grad_accum=grad_accum,
                          parallel=parallel, world_size=world_size),
    )  # fmt: skip
    spec = MemorySpec(model=config, run=flags.step(padding=padding_fraction), gpu=gpu, gpu_memory=gpu_memory)
    return finish(run(prepare(spec)), json_out)
