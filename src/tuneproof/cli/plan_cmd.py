"""`tuneproof plan`: the run's wall time projected before launch, per sampler, from its real batch plan."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.attention.paths import names
from tuneproof.cli.common import (
    command,
    console,
    json_option,
    lengths_option,
    print_json,
    probe_budget_option,
    progress_bar,
    resolve_model,
    step_fit,
    str_list,
    warn_unused,
)
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
    help="Step cost A,B (or A,B,C) of t = C + A*w + B*w^2 seconds per SEQUENCE (e.g. the CASE's "
    "6.87e-4,8.85e-8); no interval.",
)
@click.option(
    "--points",
    type=click.Path(path_type=Path),
    default=None,
    help="A width,seconds CSV of timed micro-batches (probe --out writes points.csv; its probe.json "
    "beside it gives their batch, else --micro-batch): fitted here, with a 95 % interval.",
)
@click.option(
    "--probe", is_flag=True, help="Time the model of --config now at three widths up to the longest."
)
@click.option("--config", default="tiny", show_default=True, help="Model for --probe: config.json or 'tiny'.")
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
) -> None:
    """Project the whole run's wall time from its batch plan: each micro-batch's width, the step-time
    fit, every rank waiting for the slowest; per sampler, with an interval from the fit."""
    from tuneproof import validate
    from tuneproof.data import read_lengths, synthetic_lengths
    from tuneproof.data.project import check_plan_args, project
    from tuneproof.errors import TuneproofError

    chosen = str_list(sampler)
    overhead_source = (
        "given" if step_overhead_s is not None else ("measured by the probe" if probe else "none")
    )
    check_plan_args(
        micro_batch, grad_accum, ranks, epochs, chosen, seed, step_overhead_s or 0.0, gpu_hour_cost
    )
    sources = [name for name, given in (("--fit", fit), ("--points", points), ("--probe", probe)) if given]
    if len(sources) != 1:
        raise TuneproofError(
            "give the step cost one way" + (f", not {' and '.join(sources)}" if sources else ""),
            "pass --fit A,B, --points CSV, or --probe (with --config)",
        )
    warn_unused(("config", "attn", "mode", "probe_budget_s"), "--probe", probe)
    if probe:
        validate.real("probe_budget_s", probe_budget_s, low=0.0, low_open=True, high=86_400.0)
    cost = step_fit(fit, "--fit") if fit is not None else None
    if points is not None:
        from tuneproof.measure.fit import read_points

        widths, seconds = read_points(points)  # read before the lengths: a bad file fails fast
    lengths, _ = read_lengths(lengths_file) if lengths_file is not None else synthetic_lengths()
    from tuneproof.data.project import StepModel

    if cost is not None:
        model = StepModel(cost)
    elif points is not None:
        batch, said = _points_batch(points, micro_batch)
        model = StepModel.from_points(widths, seconds, batch, seed, f"points from {points}, {said}")
    else:
        from tuneproof.data.project import probe_step_model

        with progress_bar() as update:
            model, measured = probe_step_model(
                resolve_model(config), attn, mode, micro_batch, probe_budget_s, seed, lengths, update
            )
        step_overhead_s = measured if step_overhead_s is None else step_overhead_s
    step_overhead_s = step_overhead_s or 0.0
    projections = project(lengths, micro_batch, grad_accum, model, ranks, epochs, chosen, seed,
                          step_overhead_s, gpu_hour_cost)  # fmt: skip
    data = {
        "num_lengths": int(lengths.size), "micro_batch": micro_batch, "grad_accum": grad_accum,
        "ranks": ranks, "epochs": epochs, "step_overhead_s": step_overhead_s,
        "step_overhead_source": overhead_source,
        "step_cost": {
            "A": model.cost.a, "B": model.cost.b, "C": model.cost.c, "batch": model.cost.batch,
            "source": model.source, "measured_widths": list(model.measured) if model.measured else None,
            "replicates": len(model.replicates),
            "no_interval": model.no_interval if not model.replicates else None,
        },
        "samplers": {p.sampler: p.to_dict() for p in projections},
    }  # fmt: skip
    if json_out:
        print_json(data)
        return
    from tuneproof.data.render import render_projection

    render_projection(projections, model, data, console())


def _points_batch(points: Path, micro_batch: int) -> tuple[int, str]:
    """The batch the points were timed at: the probe's own (its probe.json beside points.csv), else
    --micro-batch, and the words that say which."""
    import json

    beside = points.parent / "probe.json"
    try:
        batch = json.loads(beside.read_text())["spec"]["batch"]
    except (OSError, ValueError, KeyError, TypeError):
        return (
            micro_batch,
            f"taken as micro-batches of {micro_batch} (--micro-batch; no probe.json beside them)",
        )
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        return micro_batch, f"taken as micro-batches of {micro_batch} (probe.json's batch unreadable)"
    return batch, f"timed at batch {batch} ({beside}), scaled to the plan's micro-batches"
