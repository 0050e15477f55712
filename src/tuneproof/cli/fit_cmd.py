"""`tuneproof fit`: step-time scaling fit t = A*w + B*w^2 from timed widths."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import PATH, command, finish, int_list, json_option


@command()
@click.option(
    "--points",
    type=PATH,
    required=True,
    help="CSV with header 'width,seconds', one row per timed repeat (the probe writes it).",
)
@click.option(
    "--at", "at", default="", help="Extra widths to report the quadratic share at, e.g. 32768,65536."
)
@json_option
def fit(points: Path, at: str, json_out: bool) -> int:
    """Fit t = A*w + B*w^2 on per-width medians: quadratic (attention) share per width with 95 % intervals,
    outlying repeats named, and a constant-term test (present, absent or undetermined)."""
    from tuneproof.commands import fit as area

    spec = area.FitSpec(points=points, at=int_list(at, "--at") if at.strip() else None)
    return finish(area.run(area.prepare(spec)), json_out)
