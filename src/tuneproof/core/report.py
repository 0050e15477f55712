"""A report folder: `report.md`, `report.json` and one PNG per plot (matplotlib, Agg).

Every plot's data is in `report.json` under `plots.<name>.series`, and the same series are embedded
in the PNG's text metadata (`tuneproof-series`), so a reader (and the tests) can check that a picture
shows exactly the numbers the JSON holds. Plots are built from the results the commands print with
`--json` (the doctor's section results; a training run's section dicts), never from a second
computation. This module is the one writer of report.json, in one format, `{"title", "data",
"plots"}` (`data` is what `--json` prints): `write_report` (a report folder: the data, its plots and
report.md) and `write_json` (report.json alone, with no plots).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.io import strict

SERIES_KEY = "tuneproof-series"
REPORT_JSON = "report.json"


@dataclass(kw_only=True, slots=True)
class Plot:
    name: str
    title: str
    kind: str  # "waterfall" | "lines" | "bars"
    x_label: str
    y_label: str
    series: dict[str, dict[str, list[Any]]] = field(default_factory=dict)  # label -> {"x": [...], "y": [...]}
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "kind": self.kind, "x": self.x_label, "y": self.y_label,
                "series": self.series, "note": self.note, "file": f"{self.name}.png"}  # fmt: skip


# --- plots from section results ------------------------------------------------------------------------


def section_plots(sections: dict[str, Any], length_set: str) -> list[Plot]:
    """The waterfall (a "flops" section with its ledger "detail"), the scaling fit and kernel classes
    (a "probe" section that ran), the samplers (a "batching" section) on `length_set`, from the
    sections' dicts (a training run's)."""
    plots = []
    if "flops" in sections:
        detail = sections["flops"]["detail"]
        excess = [(e["name"], e["flops"]) for e in detail["excess"]]
        totals = (detail["intended"]["total"], detail["performed"]["total"])
        plots.append(waterfall(totals, excess, detail["run"]["attn"], detail["run"]["seq_len"]))
    plots += probe_plots(sections.get("probe", {}))
    if "batching" in sections:
        batching = sections["batching"]
        plots.append(sampler_plot(batching["samplers"], batching.get("used"), length_set))
    return plots


def probe_plots(probe: dict[str, Any]) -> list[Plot]:
    """The scaling fit and the kernel classes of a probe's result (`ProbeResult.to_dict()`), or none
    when it has no fit."""
    return [_scaling(probe), _kernels(probe)] if "fit" in probe else []


def waterfall(totals: tuple[float, float], excess: list[tuple[str, float]], attn: str, seq_len: int) -> Plot:
    names = ["intended"] + [name for name, _ in excess] + ["performed"]
    values = [totals[0]] + [flops for _, flops in excess] + [totals[1]]
    intended, performed = values[0], values[-1]
    ratio = f"{performed / intended:.2f}x intended" if intended > 0 else "intended is 0"
    return Plot(
        name="flop_waterfall",
        title=f"FLOPs of one micro-batch: intended, each named excess, performed ({attn}, width {seq_len})",
        kind="waterfall", x_label="", y_label="FLOP", series={"flops": {"x": names, "y": values}},
        note=f"performed {performed:.3g} FLOP = {ratio}; each bar between intended and performed is one "
        "excess, stacked on the ones before it",
    )  # fmt: skip


def _scaling(probe: dict[str, Any]) -> Plot:
    fit = probe["fit"]
    widths = sorted(int(float(w)) for w in fit["medians_s"])
    medians = [fit["medians_s"][str(w)] for w in widths]
    intervals = all(p.get("median_ci_s") for p in probe["points"])
    bars = {p["width"]: _bar(p, intervals) for p in probe["points"]}
    measured = "measured median (bars: its 95 % interval)" if intervals else "measured median (bars: min-max)"
    a, b, c = fit["A"], fit["B"], fit.get("C") or 0.0
    grid = _grid(widths)
    constant = {"constant part C": {"x": grid, "y": [c for _ in grid]}} if c else {}
    return Plot(
        name="scaling_fit",
        title=f"Step time vs width: measured medians and {fit['model'].split(' (')[0]} split into its parts",
        kind="lines", x_label="width (tokens)", y_label="seconds",
        series={
            measured: {
                "x": widths, "y": medians,
                "low": [bars[w][0] for w in widths], "high": [bars[w][1] for w in widths],
            },
            "fit": {"x": grid, "y": [c + a * w + b * w * w for w in grid]},
            **constant,
            "linear part A*w": {"x": grid, "y": [a * w for w in grid]},
            "quadratic part B*w^2": {"x": grid, "y": [b * w * w for w in grid]},
            "quadratic share": {
                "x": widths, "y": [fit["quad_share"].get(str(w)) for w in widths], "axis": ["right"],
            },
        },
        note=f"{fit['model']}: " + (f"C = {c:.3g} s, " if c else "")
        + f"A = {a:.3g} s/token, B = {b:.3g} s/token^2; {_cross_line(probe)}",
    )  # fmt: skip


def _cross_line(probe: dict[str, Any]) -> str:
    cross = probe.get("cross_check") or {}
    if "verdict" not in cross:
        return "no cross-check"
    notes = "; ".join(cross.get("notes") or [])
    return (
        f"quadratic share at width {cross['width']}: {100 * cross['quad_share_fit']:.1f} % from the fit vs "
        f"{100 * cross['quad_share_kernels']:.1f} % from the profiled kernels: {cross['verdict']} "
        f"({cross['reason']})" + (f"; {notes}" if notes else "")
    )


def _bar(point: dict[str, Any], interval: bool) -> tuple[float, float]:
    """A measured point's error bar: its median's 95 % interval, or the range of its repeats."""
    if interval:
        low, high = point["median_ci_s"]
        return float(low), float(high)
    times = point.get("times_s") or [point["median_s"]]
    return float(min(times)), float(max(times))


def _grid(widths: list[int]) -> list[float]:
    lo, hi = min(widths), max(widths)
    return [lo + (hi - lo) * i / 40 for i in range(41)] if hi > lo else [float(lo)]


def _kernels(probe: dict[str, Any]) -> Plot:
    kernels = probe["kernels"]
    classes = kernels["classes"]
    names = sorted(classes)
    values = [classes[c]["ms"] for c in names]
    idle = kernels.get("idle_ms")
    if idle is not None:
        names, values = [*names, "idle (no kernel running)"], [*values, idle]
    width = max(p["width"] for p in probe["points"])
    return Plot(
        name="kernel_classes",
        title=f"Time by kernel class in one profiled step at width {width} ({kernels['source']})",
        kind="bars", x_label="", y_label="ms", series={"ms": {"x": names, "y": values}},
        note=f"one step's profile at the widest probed width ({width} tokens); shares in report.json",
    )  # fmt: skip


def sampler_plot(samplers: dict[str, dict[str, Any]], used: str | None, length_set: str) -> Plot:
    """Padding (and roots per window where the lengths carry roots) per sampler, from each sampler
    result's `to_dict()`; `used` names the sampler a run used."""
    names = sorted(samplers)
    rows = [samplers[n] for n in names]
    series: dict[str, dict[str, list[Any]]] = {
        "padding fraction": {"x": names, "y": [r["padding_fraction"] for r in rows]}
    }
    roots = [r["roots_per_window"] for r in rows]
    notes = []
    if any(v is not None for v in roots):
        series["roots per window"] = {"x": names, "y": roots, "axis": ["right"]}
        notes.append(
            "roots per window: distinct source documents per gradient-accumulation window (higher mixes "
            "more); packed rows hold many documents each, so their count is not comparable"
        )
    else:
        notes.append("no roots per window: these lengths carry no source-document ids")
    if used:
        notes.append(f"this run used {used}")
    note = "; ".join(notes)
    title = "Padding and roots per window by sampler" if len(series) > 1 else "Padding by sampler"
    return Plot(
        name="samplers",
        title=f"{title} ({length_set})",
        kind="bars",
        x_label="",
        y_label="padding fraction",
        series=series,
        note=note,
    )


# --- plots from a training run ---------------------------------------------------------------------------


def train_plots(log_history: list[dict[str, Any]], sections: dict[str, Any] | None = None) -> list[Plot]:
    """Loss and the two MFUs per logging step, then the plots of `sections` (`section_plots`)."""
    logged = [h for h in log_history if "loss" in h and "step" in h]
    steps = [h["step"] for h in logged]
    series: dict[str, dict[str, list[Any]]] = {"loss": {"x": steps, "y": [h["loss"] for h in logged]}}
    note = ""
    for key in ("mfu_intended", "mfu_performed"):
        values = [h.get(f"tuneproof/{key}") for h in logged]
        if any(v is not None for v in values):
            series[key] = {"x": steps, "y": values, "axis": ["right"]}
    if len(series) == 1:
        for key in ("tflops_intended", "tflops_performed"):
            series[key] = {"x": steps, "y": [h.get(f"tuneproof/{key}") for h in logged], "axis": ["right"]}
        note = "no MFU (no peak for this device): TFLOP/s shown instead"
    title = (
        "Loss and the two MFUs per logging step"
        if not note
        else "Loss and TFLOP/s per logging step (no peak: no MFU)"
    )
    plots = [
        Plot(
            name="training",
            title=title,
            kind="lines",
            x_label="step",
            y_label="loss",
            series=series,
            note=note,
        )
    ]
    return plots + section_plots(sections or {}, "the run's own lengths")


# --- writing ---------------------------------------------------------------------------------------------


def check_report_folder(folder: Path) -> Path:
    from tuneproof.core.io import check_out_folder

    return check_out_folder(Path(folder), ("report.md", REPORT_JSON))


def check_json_folder(folder: Path) -> Path:
    """Refuse a folder `write_json` could not write report.json into, before any work."""
    from tuneproof.core.io import check_out_folder

    return check_out_folder(Path(folder), (REPORT_JSON,))


def write_json(folder: Path, title: str, data: dict[str, Any]) -> Path:
    """report.json alone in `folder`, in the one format: `data` as `--json` prints it, no plots."""
    check_json_folder(folder)
    return _write_json(Path(folder), {"title": title, "data": data, "plots": {}})


def _write_json(folder: Path, payload: dict[str, Any]) -> Path:
    from tuneproof.core.io import atomic_write_json

    return atomic_write_json(folder / REPORT_JSON, payload)


def write_report(
    folder: Path, title: str, data: dict[str, Any], plots: list[Plot], summary: list[str]
) -> Path:
    """report.json (`data` and every plot's series), report.md (the summary and the plots), the PNGs."""
    from tuneproof.core.io import atomic_write_text

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for plot in plots:
        _draw(plot, folder / f"{plot.name}.png")
    _write_json(folder, {"title": title, "data": data, "plots": {p.name: p.to_dict() for p in plots}})
    md = [f"# {title}", "", *summary, ""]
    for plot in plots:
        md += [f"## {plot.title}", "", f"![{plot.name}]({plot.name}.png)", ""]
        if plot.note:
            md += [plot.note, ""]
    atomic_write_text(folder / "report.md", "\n".join(md))
    return folder


def _draw(plot: Plot, path: Path) -> None:
    import matplotlib  # a core dependency

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5.6), dpi=100)
    right = None
    try:
        if plot.kind == "waterfall":
            (s,) = plot.series.values()
            base = 0.0
            for i, (name, value) in enumerate(zip(s["x"], s["y"], strict=True)):
                total = i in (0, len(s["x"]) - 1)
                bottom = 0.0 if total else base
                ax.bar(i, value, bottom=bottom, color="#4c72b0" if total else "#dd8452")
                base = value if i == 0 else base + (0 if total else value)
                del name
            ax.set_xticks(range(len(s["x"])), [_wrapped(x) for x in s["x"]], fontsize=7)
        elif plot.kind == "bars":
            names = next(iter(plot.series.values()))["x"]
            width = 0.8 / len(plot.series)
            for j, (label, s) in enumerate(plot.series.items()):
                target, right = _axis(ax, right, s, label)
                target.bar([i + j * width for i in range(len(names))], _finite(s["y"]), width, label=label,
                           color=f"C{j}")  # fmt: skip
            ax.set_xticks(
                [i + width * (len(plot.series) - 1) / 2 for i in range(len(names))], names, fontsize=8
            )
        else:
            for j, (label, s) in enumerate(plot.series.items()):
                target, right = _axis(ax, right, s, label)
                style = "o" if "measured" in label else "-"
                target.plot(s["x"], _finite(s["y"]), style, label=label, color=f"C{j}")
                if "low" in s:
                    below = [max(y - lo, 0.0) for y, lo in zip(s["y"], s["low"], strict=True)]
                    above = [max(hi - y, 0.0) for y, hi in zip(s["y"], s["high"], strict=True)]
                    target.errorbar(s["x"], s["y"], yerr=[below, above], fmt="none", color=f"C{j}", capsize=4)
        ax.set_title(plot.title, fontsize=10)
        ax.set_xlabel(plot.x_label)
        ax.set_ylabel(plot.y_label)
        handles = ax.get_legend_handles_labels()
        if right is not None:
            more = right.get_legend_handles_labels()
            handles = (handles[0] + more[0], handles[1] + more[1])
        if handles[0]:
            ax.legend(*handles, fontsize=8, loc="best")
        fig.tight_layout()
        fig.savefig(
            path, format="png", metadata={SERIES_KEY: json.dumps(strict(plot.series), allow_nan=False)}
        )
    finally:
        plt.close(fig)


def _axis(ax: Any, right: Any, series: dict[str, Any], label: str) -> tuple[Any, Any]:
    """The axis a series is drawn on: the left one, or a right one (made once, labelled by its first
    series) for series marked "axis": ["right"]. Returns (target, right)."""
    if series.get("axis") != ["right"]:
        return ax, right
    if right is None:
        right = ax.twinx()
        right.set_ylabel(RIGHT_AXIS.get(label, label))
    return right, right


# the right axis is named after its first series; these name what all of its series share
RIGHT_AXIS = {"mfu_intended": "MFU", "tflops_intended": "TFLOP/s"}


def _finite(values: list[Any]) -> list[float]:
    return [float(v) if isinstance(v, int | float) and math.isfinite(v) else math.nan for v in values]


def _wrapped(text: str, width: int = 22) -> str:
    """A bar's label on a few short lines (a waterfall's names are long: 'sliding attention (4 layers,
    sliding w=128): sdpa')."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def png_series(path: Path) -> dict[str, Any]:
    """The series embedded in a report PNG (what the picture was drawn from)."""
    from PIL import Image

    with Image.open(path) as image:
        image.load()
        return json.loads(image.text[SERIES_KEY])  # type: ignore[attr-defined]
