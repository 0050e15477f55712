"""`tuneproof doctor`: the whole diagnosis on one model, end to end."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import (
    command,
    config_option,
    console,
    json_option,
    print_json,
    probe_budget_option,
    progress_bar,
    resolve_model,
)


@command()
@config_option
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder to write report.json into (created if missing).",
)
@probe_budget_option("the probe section")
@click.option(
    "--report",
    "report_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Folder for report.md, report.json and PNG plots (FLOP waterfall, scaling fit, kernels, samplers).",
)
@json_option
def doctor(
    config: str, out: Path | None, probe_budget_s: float, report_dir: Path | None, json_out: bool
) -> None:
    """Diagnose a setup end to end: FLOP ledger, attention dispatch, batching, measured probe."""
    from tuneproof import validate
    from tuneproof.doctor import OUT_FILES, run_doctor, write_report
    from tuneproof.io import check_out_folder

    validate.real("probe_budget_s", probe_budget_s, low=0.0, low_open=True, high=86_400.0)
    if out is not None:
        check_out_folder(out, OUT_FILES)
    if report_dir is not None:
        from tuneproof.report import check_report_folder

        check_report_folder(report_dir)
    model = resolve_model(config)
    with progress_bar() as update:
        report = run_doctor(model, probe_budget_s, progress=update)
    if out is not None:
        path = write_report(report, out)
        if not json_out:
            console().print(f"report written to {path}")
    if report_dir is not None:
        from tuneproof.report import doctor_plots
        from tuneproof.report import write_report as write_plots

        data = report.to_dict()
        summary = [f"Model: {model.name}.", "Every number below is in report.json; every plot's series too."]
        write_plots(report_dir, "tuneproof doctor", data, doctor_plots(data), summary)
        if not json_out:
            console().print(f"report (markdown, JSON, plots) written to {report_dir}")
    if json_out:
        print_json(report.to_dict())
    else:
        report.render(console())
