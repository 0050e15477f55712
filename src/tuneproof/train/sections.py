"""What `tuneproof train` measures for its report after training, on the run's own model and data.

- flops: the FLOP ledger of one real micro-batch of the run at its median padded width (its own row
  lengths), intended through each named excess to performed;
- batching: the samplers compared on the run's own token lengths (padding, attention FLOPs);
- probe: the measurement probe on the run's model config (random weights, the run's attention path,
  micro-batch, LoRA rank and checkpointing) at three widths spanning the run's: the scaling fit
  t = A*w + B*w^2 with its spread, and the profiler's kernel classes. `run.probe_budget_s = 0` turns
  it off; a probe that cannot run says why in the report instead of a plot.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuneproof.arch.targets import peft_matches
from tuneproof.core.errors import TuneproofError
from tuneproof.measure.probe import span_widths as probe_widths


def report_sections(
    config: Any,
    recipe: Any,
    attention: str,
    device: str,
    lengths: list[int],
    callback: Any,
    progress: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(sections as the report's plots read them, notes on what could not be measured and why)."""
    import numpy as np

    from tuneproof.arch import resolve
    from tuneproof.data.compare import compare

    resolved = resolve(config)
    sections: dict[str, Any] = {}
    notes: list[str] = []
    typical = callback.typical_micro_batch()
    if typical is not None:
        sections["flops"] = {"detail": typical.to_dict(), "what": "one real micro-batch at the median width"}
    else:
        notes.append("no FLOP waterfall: the callback saw no training step")
    opt = recipe.optim
    ledger_attn = "sdpa" if attention == "auto" else attention
    results, _ = compare(
        np.asarray(lengths), None, opt.micro_batch, opt.grad_accum, shape=resolved.shape, attn=ledger_attn,
        seed=opt.seed,
    )  # fmt: skip
    sections["batching"] = {
        "samplers": {r.name: r.to_dict() for r in results},
        "num_lengths": len(lengths),
        "what": "the run's own token lengths",
        "used": "bucketed (tuneproof's BucketBatchSampler)",
    }
    probe, reason = _probe(resolved, recipe, attention, device, lengths, progress)
    if probe is not None:
        sections["probe"] = probe
    else:
        notes.append(f"no scaling fit or kernel classes: {reason}")
    return sections, notes


def _probe(
    resolved: Any,
    recipe: Any,
    attention: str,
    device: str,
    lengths: list[int],
    progress: Callable[[str], None] | None,
) -> tuple[dict[str, Any] | None, str]:
    from tuneproof.measure.probe import ProbeSpec, run_probe

    budget = float(recipe.run.probe_budget_s)
    if budget <= 0:
        return None, "run.probe_budget_s is 0 (the probe is off)"
    widths = probe_widths(lengths)
    if widths is None:
        return None, f"the run's widest sequence ({max(lengths)} tokens) is too short to fit a scaling law"
    try:
        spec = ProbeSpec(
            attn=attention, widths=widths, batch=recipe.optim.micro_batch, mode="lora",
            grad_ckpt=recipe.optim.grad_ckpt, device=device, lora_rank=recipe.lora.r, budget_s=budget,
            seed=recipe.optim.seed, lora_targets=run_targets(resolved, recipe.lora.targets),
            over_budget="floor",  # a side measurement of the run: its floor runs, said over budget
        )  # fmt: skip
        if progress:
            progress(f"probing the step time at widths {', '.join(map(str, widths))} ({budget:g} s)")
        return run_probe(resolved, spec).to_dict(), ""
    except TuneproofError as e:
        return None, f"the probe cannot run here: {e.message}"


def run_targets(resolved: Any, targets: str | list[str]) -> tuple[str, ...] | None:
    """The run's LoRA targets as the probe takes them (module paths inside a layer), matched the way
    PEFT matches a list of names (the whole path, or its last components); None for all-linear."""
    from tuneproof.measure.model import lora_targets

    if isinstance(targets, str):
        return None  # "all-linear": every linear but the head, the probe's own default
    names = lora_targets(resolved.shape)
    return tuple(n for n in names if peft_matches(n, targets)) or None


def write_run_report(
    folder: Path,
    recipe: Any,
    attention: str,
    cuda: bool,
    callback: Any,
    health: str | None,
    progress: Callable[[str], None] | None,
    *,
    config: Any,
    lengths: list[int],
    log_history: list[dict[str, Any]],
    processes: dict[str, Any] | None = None,
) -> Path:
    """report.md / report.json / PNGs in `folder`: loss and the two MFUs per logging step, every
    step's FLOPs (the callback's history), and the run's own FLOP waterfall, scaling fit, kernel
    classes and samplers (`report_sections`); on several processes, each rank's own billing
    (`processes`: its micro-batches' tokens and FLOPs; `steps` are rank 0's). Returns report.md's path."""
    from dataclasses import asdict

    from tuneproof.core.report import train_plots, write_report

    device = "cuda" if cuda else "cpu"
    sections, notes = report_sections(config, recipe, attention, device, lengths, callback, progress)
    data = {
        "recipe": recipe.to_toml(),
        "log_history": log_history,
        "steps": [asdict(s) for s in callback.history],
        "adapter_health": health,
        "sections": sections,
        "notes": notes,
        "processes": processes,
    }
    summary = [
        f"Adapter health: {health or 'unknown'}.",
        *(f"Not measured: {note}." for note in notes),
        *([_processes_line(processes)] if processes else []),
        "Every logged value, every step's FLOPs and every plot's data are in report.json.",
    ]
    write_report(folder, "tuneproof train", data, train_plots(log_history, sections), summary)
    return folder / "report.md"


def _processes_line(processes: dict[str, Any]) -> str:
    """One sentence on a run over several processes: how, and each rank's own real tokens."""
    how = processes["distributed_type"]
    if processes["fsdp_version"] is not None:
        how += f" {processes['fsdp_version']}"
    tokens = ", ".join(f"rank {r['rank']} {r['tokens']:,}" for r in processes["ranks"])
    return (
        f"Trained on {processes['num_processes']} processes ({how}); each rank billed its own "
        f"micro-batches (real tokens: {tokens}); report.json has every rank's steps, its steps are rank 0's."
    )
