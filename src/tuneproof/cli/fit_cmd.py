"""`tuneproof fit`: step-time scaling fit t = A*w + B*w^2 from timed widths."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import command, console, int_list, json_option, print_json


@command()
@click.option(
    "--points",
    type=click.Path(path_type=Path),
    required=True,
    help="CSV with header 'width,seconds', one row per timed repeat (the probe writes it).",
)
@click.option(
    "--at", "at", default="", help="Extra widths to report the quadratic share at, e.g. 32768,65536."
)
@json_option
def fit(points: Path, at: str, json_out: bool) -> None:
    """Fit t = A*w + B*w^2 on per-width medians: quadratic (attention) share per width with 95 % intervals,
    outlying repeats named, and a constant-term test (present, absent or undetermined)."""
    from tuneproof import validate
    from tuneproof.measure import fit_scaling, read_points

    extra = [float(x) for x in validate.integers("at", int_list(at, "--at"))] if at.strip() else []
    widths, seconds = read_points(points)
    result = fit_scaling(widths, seconds, at=extra)
    if json_out:
        print_json(result.to_dict())
        return
    from tuneproof.measure.render import render_fit

    render_fit(result, console())
