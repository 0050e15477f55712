"""`tuneproof plan`: the run's wall time projected before launch, per sampler, from its real batch plan."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.attention.paths import names
from tuneproof.cli.common import (
    PATH,
    command,
    finish,
    json_option,
    lengths_option,
    probe_budget_option,
    resolve_model,
    step_fit,
    str_list,
    terminal_progress,
    warn_unused,
)
from tuneproof.data.compare import CASE_FIT_TEXT
from tuneproof.data.compare import PLAN_SAMPLERS as SAMPLERS


@command()
@lengths_option
@click.option("--micro-batch", type=int, default=2, show_default=True, help="Sequences per micro-batch.")
@click.option(
    "--grad-accum", type=int, default=1, show_default=True, help="Micro-batches per optimizer step."
)
@click.option("--ranks", type=int, default=1, show_default=True, help="Processes (GPUs), DDP.")
@click.option("--epochs", type=float, default=1.0, show_default=True, help="Passes over the lengths.")
@click.option(
    "--fit",
    default=None,
    help="Step cost A,B (or A,B,C) of t = C + A*w + B*w^2 seconds per SEQUENCE (e.g. the reference run's "
    f"{CASE_FIT_TEXT}); no interval.",
)
@click.option(
    "--points",
    type=PATH,
    default=None,
    help="A width,seconds CSV of timed micro-batches (probe --out writes points.csv; its probe.json "
    "beside it gives their batch, else --micro-batch): fitted here, with a 95 % interval.",
)
@click.option(
    "--probe", is_flag=True, help="Time the model of --config now at three widths up to the longest."
)
@click.option(
    "--config",
    default="tiny",
    show_default=True,
    help="Model for --probe: config.json, a hub id in the local Hugging Face cache (owner/name) or 'tiny'.",
)
@click.option(
    "--attn",
    default="sdpa",
    show_default=True,
    help="Attention path for --probe: " + ", ".join(names(probe=True)) + ".",
)
@click.option("--mode", default="lora", show_default=True, help="Step --probe times: full, lora or forward.")
@probe_budget_option("--probe")
@click.option(
    "--sampler",
    default=",".join(SAMPLERS),
    show_default=True,
    help="Samplers to project, side by side.",
)
@click.option(
    "--step-overhead",
    "step_overhead_s",
    type=float,
    default=None,
    help="Seconds each optimizer step adds beyond its micro-batches (optimizer update, logging). "
    "Default: measured by --probe (a Trainer step minus its bare micro-batch), else 0.",
)
@click.option("--gpu-hour-cost", type=float, default=None, help="USD per GPU-hour: adds each run's cost.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the samplers' shuffles.")
@json_option
def plan(
    lengths_file: Path | None,
    micro_batch: int,
    grad_accum: int,
    ranks: int,
    epochs: float,
    fit: str | None,
    points: Path | None,
    probe: bool,
    config: str,
    attn: str,
    mode: str,
    probe_budget_s: float,
    sampler: str,
    step_overhead_s: float | None,
    gpu_hour_cost: float | None,
    seed: int,
    json_out: bool,
) -> int:
    """Project the whole run's wall time from its batch plan: each micro-batch's width, the step-time
    fit, every rank waiting for the slowest; per sampler, with an interval from the fit."""
    from tuneproof.commands import plan as area

    warn_unused(("config", "attn", "mode", "probe_budget_s"), "--probe", probe)
    cost = step_fit(fit, "--fit") if fit is not None else None
    spec = area.ProjectionSpec(
        lengths_file=lengths_file,
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        ranks=ranks,
        epochs=epochs,
        fit=cost,
        points=points,
        probe=resolve_model(config) if probe else None,
        attn=attn,
        mode=mode,
        probe_budget_s=probe_budget_s,
        samplers=str_list(sampler, "--sampler"),
        step_overhead_s=step_overhead_s,
        gpu_hour_cost=gpu_hour_cost,
        seed=seed,
    )
    plan = area.prepare(spec)
    with terminal_progress() as update:
        result = area.run(plan, update)
    return finish(result, json_out)
