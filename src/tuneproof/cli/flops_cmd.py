"""`tuneproof flops`: the intended vs performed FLOP ledger and MFU for one step."""

from __future__ import annotations

import click

from tuneproof.cli.common import config_option, console, json_option, print_json, resolve_config
from tuneproof.errors import TuneproofError

ATTN_CHOICES = ("eager", "sdpa", "flash_attention_2", "flex_attention")  # = tuneproof.flops.ATTN_PATHS


@click.command()
@config_option
@click.option("--seq-len", type=int, required=True, help="Padded width T of every sequence, tokens.")
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences per micro-batch, B.")
@click.option(
    "--attn", default="sdpa", show_default=True, help="Attention path: " + ", ".join(ATTN_CHOICES) + "."
)
@click.option(
    "--padding-fraction",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of the B*T token slots that are padding, in [0, 1).",
)
@click.option(
    "--mode", default="full", show_default=True, help="forward (no backward), full (all weights), lora."
)
@click.option("--lora-rank", type=int, default=16, show_default=True, help="LoRA rank r (with --mode lora).")
@click.option(
    "--lora-targets",
    default="all-linear",
    show_default=True,
    help="Comma list of nn.Linear names (PEFT target_modules), or all-linear (every nn.Linear but lm_head).",
)
@click.option("--grad-ckpt", is_flag=True, help="Activation checkpointing on every decoder layer.")
@click.option("--step-time", type=float, default=None, help="Measured seconds per micro-batch step, for MFU.")
@click.option("--gpu", default=None, help="GPU name as torch or nvidia-smi reports it; gives the peak.")
@click.option("--dtype", default="bf16", show_default=True, help="Dtype of the peak: bf16, fp16, fp8, tf32.")
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
    grad_ckpt: bool,
    step_time: float | None,
    gpu: str | None,
    dtype: str,
    peak_tflops: float | None,
    json_out: bool,
) -> None:
    """Intended vs performed FLOPs per component and pass, each excess named, and MFU."""
    from tuneproof.flops import RunSpec, flop_report
    from tuneproof.hardware import Peak, lookup_gpu, normalise_dtype, peak_for

    peak: Peak | None = None
    if peak_tflops is not None:
        if peak_tflops <= 0:
            raise TuneproofError(
                f"--peak-tflops must be > 0, got {peak_tflops}", "pass dense TFLOP/s, e.g. 989"
            )
        peak = Peak(peak_tflops, "--peak-tflops (user given)", normalise_dtype(dtype))
    elif gpu is not None:
        peak = peak_for(lookup_gpu(gpu), dtype)
    if step_time is not None:
        if step_time <= 0:
            raise TuneproofError(
                f"--step-time must be > 0, got {step_time}", "pass measured seconds per step"
            )
        if peak is None:
            raise TuneproofError("--step-time needs a peak for MFU", "add --gpu NAME or --peak-tflops P")
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip())
    run = RunSpec(
        seq_len=seq_len,
        batch=batch,
        attn=attn,
        padding_fraction=padding_fraction,
        mode=mode,
        lora_rank=lora_rank,
        lora_targets=targets or ("all-linear",),
        grad_ckpt=grad_ckpt,
    )
    report = flop_report(resolve_config(config), run, step_time_s=step_time, peak=peak)
    if json_out:
        print_json(report.to_dict())
    else:
        from tuneproof.flops.render import render_report

        render_report(report, console())
