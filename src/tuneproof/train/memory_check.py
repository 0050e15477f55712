"""The callback's memory line: the peak the CUDA allocator measured over the logged steps beside the
memory ledger's prediction for the widest micro-batch seen, and a warning when they part by more than
`PART` (the ledger's tolerance against MemTracker)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

PART = 0.10


def optimizer_impl(args: Any) -> str:
    """torch's AdamW implementation the Trainer builds from `args.optim`: the fused kernel for
    adamw_torch_fused (transformers' default), foreach for plain adamw_torch on CUDA."""
    optim = str(getattr(args, "optim", "adamw_torch_fused"))
    return "fused" if "fused" in optim else "foreach"


def predicted_peak(run: Any, args: Any) -> tuple[int, str] | None:
    """The ledger's peak for the widest micro-batch the run has seen (None before any): bytes, and
    what it sized."""
    from tuneproof.memory.step import Precision, Training, step_memory

    if run.resolved is None or not run.widths_seen:
        return None
    width = max(run.widths_seen)
    batch = run.widths_seen[width][1].batch
    step = replace(run.step, seq_len=width, batch=batch)
    autocast = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    precision = Precision(dtype=run.dtype, autocast=autocast)
    accumulation = int(getattr(args, "gradient_accumulation_steps", 1) or 1)
    training = Training(optimizer_impl=optimizer_impl(args), grad_accum=max(accumulation, 1))
    got = step_memory(run.resolved, step, precision, training, capability=run.capability)
    return got.peak.peak_bytes, f"B={batch} x T={width}"


def memory_metrics(measured: int, predicted: tuple[int, str] | None) -> tuple[dict[str, float], str | None]:
    """The logged numbers, and the warning when the measured peak and the prediction part."""
    if predicted is None:
        return {"memory_peak_measured": float(measured)}, None
    bytes_, what = predicted
    part = measured / bytes_ - 1 if bytes_ else float("inf")
    metrics = {"memory_peak_measured": float(measured), "memory_peak_predicted": float(bytes_)}
    if abs(part) <= PART:
        return metrics, None
    return metrics, (
        f"peak memory {measured / 2**30:.2f} GiB measured, {bytes_ / 2**30:.2f} GiB predicted for {what} "
        f"({part:+.0%}): what the ledger cannot see (kernel workspaces, another model or cache on the card) "
        "or a path it did not expect; 'tuneproof memory' itemises the prediction"
    )
