"""`tuneproof fit`: step-time scaling fit t = A*w + B*w^2 from timed widths."""

from __future__ import annotations

from pathlib import Path

import click

from tuneproof.cli.common import console, json_option, print_json
from tuneproof.errors import TuneproofError


def _widths(text: str | None) -> list[float]:
    if not text:
        return []
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise TuneproofError(f"--at {text!r} is not a comma list of widths", "e.g. --at 2048,16384") from None
    if any(x <= 0 for x in out):
        raise TuneproofError(f"--at {text!r} has a width <= 0", "widths are positive token counts")
    return out


@click.command()
@click.option(
    "--points",
    type=click.Path(path_type=Path),
    required=True,
    help="CSV with header 'width,seconds', one row per timed repeat (the probe writes it).",
)
@click.option(
    "--at", "at", default=None, help="Extra widths to report the quadratic share at, e.g. 32768,65536."
)
@json_option
def fit(points: Path, at: str | None, json_out: bool) -> None:
    """Fit t = A*w + B*w^2 (no constant): quadratic (attention) share per width, and a constant-term test."""
    from tuneproof.measure import fit_scaling, read_points

    widths, seconds = read_points(points)
    result = fit_scaling(widths, seconds, at=_widths(at))
    if json_out:
        print_json(result.to_dict())
        return
    from rich.table import Table

    out = console()
    out.print(
        f"t(w) = A*w + B*w^2, NNLS over {result.num_rows} rows: A = {result.a:.4g} s/token, "
        f"B = {result.b:.4g} s/token^2"
    )
    table = Table(
        title=f"quadratic share B*w^2/(A*w+B*w^2), 95 % bootstrap CI ({result.num_bootstrap} resamples)"
    )
    for col in ("width", "rows", "median t (s)", "fit t (s)", "quadratic share", "95 % CI"):
        table.add_column(col, justify="right")
    for w, share in result.quad_share.items():
        rows = seconds[widths == w]
        lo, hi = result.quad_share_ci[w]
        table.add_row(
            f"{w:g}",
            str(len(rows)),
            f"{float(sorted(rows)[len(rows) // 2]):.4g}" if len(rows) else "-",
            f"{result.a * w + result.b * w * w:.4g}",
            f"{100 * share:.1f} %",
            f"{100 * lo:.1f}-{100 * hi:.1f} %",
        )
    out.print(table)
    worst = max(abs(r) for r in result.residuals_s)
    out.print(f"largest residual: {worst * 1e3:.2f} ms")
    out.print(f"constant term: {result.constant.reason}")
