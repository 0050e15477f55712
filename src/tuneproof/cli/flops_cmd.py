"""`tuneproof flops`: the intended vs performed FLOP ledger and MFU for one step."""

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
@click.option(
    "--mode", default="full", show_default=True, help="forward (no backward), full (all weights), lora."
)
@lora_options
@click.option("--step-time", type=float, default=None, help="Measured seconds per micro-batch step, for MFU.")
@click.option(
    "--gpu",
    default=None,
    help="GPU name as torch or nvidia-smi reports it, or auto (this device); gives the peak.",
)
@click.option(
    "--dtype", default="bf16", show_default=True, help="Dtype of the peak: bf16, fp16, fp8, fp4, tf32."
)
@click.option(
    "--peak-tflops", type=float, default=None, help="Dense peak TFLOP/s; overrides the --gpu table."
)
@json_option
def flops(
    config: str,
    seq_len: int,
    batch: int,
    attn: str,
    padding_fraction: float,
    mode: str,
    lora_rank: int,
    lora_targets: str,
    lora_target_parameters: tuple[str, ...],
    grad_ckpt: bool,
    step_time: float | None,
    gpu: str | None,
    dtype: str,
    peak_tflops: float | None,
    json_out: bool,
) -> int:
    """Intended vs performed FLOPs per component and pass, each excess named, and MFU."""
    from tuneproof.commands.flops import FlopsSpec, prepare, run
    from tuneproof.runs.run import Run

    warn_unused(("lora_rank", "lora_targets", "lora_target_parameters"), "--mode lora", mode == "lora")
    warn_unused(("gpu", "peak_tflops", "dtype"), "--step-time (MFU needs a step time)", step_time is not None)
    flags = Run.of_flags(
        attn=attn, mode=mode, seq_len=seq_len, micro_batch=batch, lora_r=lora_rank,
        targets=() if lora_targets == "none" else str_list(lora_targets, "--lora-targets"),
        target_parameters=target_parameters(lora_target_parameters), grad_ckpt=grad_ckpt,
    )  # fmt: skip
    step = flags.step(padding=padding_fraction)
    spec = FlopsSpec(
        model=config, run=step, step_time_s=step_time, gpu=gpu, dtype=dtype, peak_tflops=peak_tflops
    )  # checked before the model is read
    return finish(run(prepare(spec)), json_out)
