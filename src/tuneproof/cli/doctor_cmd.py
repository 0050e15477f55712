"""`tuneproof doctor`: the whole diagnosis on one model, end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tuneproof.cli.common import (
    PATH,
    command,
    config_option,
    finish,
    json_option,
    probe_budget_option,
    terminal_progress,
    with_model,
)


@command()
@config_option
@click.option(
    "--out",
    type=PATH,
    default=None,
    help="Folder to write report.json into (created if missing).",
)
@probe_budget_option("the probe section")
@click.option(
    "--report",
    "report_dir",
    type=PATH,
    default=None,
    help="Folder for report.md, report.json and PNG plots (FLOP waterfall, scaling fit, kernels, samplers).",
)
@json_option
def doctor(
    config: str, out: Path | None, probe_budget_s: float, report_dir: Path | None, json_out: bool
) -> int:
    """Diagnose a setup end to end: FLOP ledger, attention dispatch, batching, measured probe."""
    from tuneproof.commands.doctor import DoctorSpec, prepare, run

    spec = DoctorSpec(model=config, probe_budget_s=probe_budget_s, out=out, report_dir=report_dir)
    plan = prepare(with_model(spec))
    with terminal_progress() as update:
        result = run(plan, update, notice=lambda line: print(line, file=sys.stderr, flush=True))
    return finish(result, json_out)
