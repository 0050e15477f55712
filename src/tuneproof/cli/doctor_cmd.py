"""`tuneproof doctor`: the whole diagnosis on one model, end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tuneproof.cli.common import console, print_json


def doctor(
    config: Annotated[str, typer.Option(help="config.json path; 'tiny' = the embedded Gemma-4-style model.")] = "tiny",
    out: Annotated[Path | None, typer.Option(help="Folder to write report.json into (created if missing).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
) -> None:
    """Diagnose a fine-tuning setup: FLOP ledger at several widths (more sections follow)."""
    from tuneproof.doctor import run_doctor, write_report

    report = run_doctor(config)
    if out is not None:
        path = write_report(report, out)
        if not json_out:
            console().print(f"report written to {path}")
    if json_out:
        print_json(report.to_dict())
    else:
        report.render(console())
