"""`tuneproof preflight RUN`: what a run's own config will do, before launch."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import PATH, command, finish, json_option, step_fit, terminal_progress


@command()
@click.argument("run_file", metavar="RUN", type=PATH)
@click.option(
    "--gpu",
    default=None,
    help="The card (name as torch or nvidia-smi reports it, its capability as 9.0 or sm_90, or auto: this "
    "device): dispatch, flex options.",
)
@click.option("--fit", default=None, help="A,B or A,B,C step-time fit (tuneproof fit) for the wall time.")
@json_option
def preflight(run_file: Path, gpu: str | None, fit: str | None, json_out: bool) -> int:
    """Read an Axolotl YAML or a tuneproof recipe and say, before launch, what will be slow or wrong:
    the FLOP ledger at the run's width, the attention dispatch per layer type and why, padding or
    packing on the real lengths of local datasets, flex kernel options for --gpu, the recompile risk,
    LoRA coverage, merge and quantisation notes, and the wall time with --fit. Exit 0 clean, 1 findings,
    2 bad input."""
    from tuneproof.commands.preflight import PreflightSpec, prepare, run

    spec = PreflightSpec(run_file=run_file, gpu=gpu, fit=step_fit(fit, "--fit") if fit is not None else None)
    plan = prepare(spec)
    with terminal_progress() as update:
        result = run(plan, update)
    return finish(result, json_out)
