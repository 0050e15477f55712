"""`tuneproof flops`: the intended vs performed FLOP ledger and MFU for one step."""

from __future__ import annotations

from typing import Annotated

import typer

from tuneproof.cli.common import console, print_json, resolve_config
from tuneproof.errors import TuneproofError


def flops(
    seq_len: Annotated[int, typer.Option("--seq-len", help="Padded width T of every sequence, tokens.")],
    config: Annotated[str, typer.Option(help="config.json path (or its folder); 'tiny' = embedded model.")] = "tiny",
    batch: Annotated[int, typer.Option(help="Sequences per micro-batch, B.")] = 1,
    attn: Annotated[str, typer.Option(help="Attention path: eager, sdpa, flash_attention_2, flex_attention.")] = "sdpa",
    padding_fraction: Annotated[float, typer.Option(
        "--padding-fraction", help="Share of the B*T token slots that are padding, in [0, 1).")] = 0.0,
    mode: Annotated[str, typer.Option(help="forward (no backward), full (all weights train), lora.")] = "full",
    lora_rank: Annotated[int, typer.Option("--lora-rank", help="LoRA rank r (with --mode lora).")] = 16,
    lora_targets: Annotated[str, typer.Option(
        "--lora-targets", help="Comma list of nn.Linear names (PEFT target_modules), or all-linear.")] = "all-linear",
    grad_ckpt: Annotated[bool, typer.Option("--grad-ckpt", help="Activation checkpointing on every layer.")] = False,
    step_time: Annotated[float | None, typer.Option(
        "--step-time", help="Measured seconds per optimizer micro-step, for MFU.")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU name as torch or nvidia-smi reports it, for the peak.")] = None,
    dtype: Annotated[str, typer.Option(help="Compute dtype of the peak: bf16, fp16, fp8, tf32.")] = "bf16",
    peak_tflops: Annotated[float | None, typer.Option(
        "--peak-tflops", help="Dense peak TFLOP/s to use instead of the GPU table.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """Intended vs performed FLOPs per component and pass, each excess named, and MFU."""
    from tuneproof.flops import RunSpec, flop_report
    from tuneproof.hardware import Peak, lookup_gpu, normalise_dtype, peak_for

    peak: Peak | None = None
    if peak_tflops is not None:
        if peak_tflops <= 0:
            raise TuneproofError(f"--peak-tflops must be > 0, got {peak_tflops}", "pass dense TFLOP/s, e.g. 989")
        peak = Peak(peak_tflops, "--peak-tflops (user given)", normalise_dtype(dtype))
    elif gpu is not None:
        peak = peak_for(lookup_gpu(gpu), dtype)
    if step_time is not None:
        if step_time <= 0:
            raise TuneproofError(f"--step-time must be > 0, got {step_time}", "pass measured seconds per step")
        if peak is None:
            raise TuneproofError("--step-time needs a peak for MFU", "add --gpu NAME or --peak-tflops P")
    targets = tuple(t.strip() for t in lora_targets.split(",") if t.strip())
    run = RunSpec(seq_len=seq_len, batch=batch, attn=attn, padding_fraction=padding_fraction, mode=mode,
                  lora_rank=lora_rank, lora_targets=targets or ("all-linear",), grad_ckpt=grad_ckpt)
    report = flop_report(resolve_config(config), run, step_time_s=step_time, peak=peak)
    if json_out:
        print_json(report.to_dict())
    else:
        from tuneproof.flops.render import render_report

        render_report(report, console())
