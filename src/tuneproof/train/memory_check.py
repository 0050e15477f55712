"""The callback's memory line: the peak the CUDA allocator measured over the logged steps beside the
memory ledger's prediction for the widest micro-batch seen, and a warning when they part by more than
`PART` (the ledger's tolerance against MemTracker)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

PART = 0.10


def predicted_peak(run: Any) -> tuple[int, str] | None:
    """The ledger's peak for the widest micro-batch the run has seen (None before any): bytes, and
    what it sized. The run's step holds the Trainer's precision, optimizer and accumulation
    (`tuneproof.runs.trainer`)."""
    from tuneproof.memory.step import step_memory

    if run.resolved is None or not run.widths_seen:
        return None
    width = max(run.widths_seen)
    batch = run.widths_seen[width][1].batch
    step = replace(run.step, seq_len=width, batch=batch)
    got = step_memory(run.resolved, step, card=run.card)
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
