"""`tuneproof doctor`: the whole diagnosis on one model, end to end."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import config_option, console, json_option, print_json
from tuneproof.io import check_out_folder


@click.command()
@config_option
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder to write report.json into (created if missing).",
)
@json_option
def doctor(config: str, out: Path | None, json_out: bool) -> None:
    """Diagnose a setup end to end: FLOP ledger, attention dispatch, batching, measured probe."""
    from tuneproof.cli.common import progress_bar
    from tuneproof.doctor import run_doctor, write_report

    if out is not None:
        check_out_folder(out)
    with progress_bar() as update:
        report = run_doctor(config, progress=update)
    if out is not None:
        path = write_report(report, out)
        if not json_out:
            console().print(f"report written to {path}")
    if json_out:
        print_json(report.to_dict())
    else:
        report.render(console())
