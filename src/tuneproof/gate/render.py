"""The gate as tables: one row per metric with both arms, the delta, the floor it was judged against, the
ratio, the interval, the smallest effect the gate could have called, and the verdict."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from tuneproof.gate.stats import FAIL, PASS, MetricResult, ratio_text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from tuneproof.gate.run import GateReport

_STYLE = {PASS: "green", FAIL: "bold red"}


_ARROW = {"up": "↑", "down": "↓", "no-change": "="}


def _num(x: float | None, unit: str, signed: bool = False) -> str:
    """3 decimals for ratios in [0, 1]-ish units; 1 decimal for percent (deltas of percent are points)."""
    if x is None:
        return "-"
    if unit:
        return f"{x:+.1f}" if signed else f"{x:.1f}"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _verdict(m: MetricResult) -> str:
    if m.verdict is None:
        return "not judged"
    return f"[{_STYLE.get(m.verdict, 'yellow')}]{m.verdict}[/]"


def _row(m: MetricResult, name: str) -> list[str]:
    floor = "-" if m.floor is None else _num(m.floor, m.unit)
    if m.floor_source == "given":
        floor += "*"
    elif m.floor_source == "threshold":
        floor = f"max {floor}"
    return [
        f"{name} {_ARROW.get(m.wanted, '')}",
        _num(m.base, m.unit),
        _num(m.tuned, m.unit),
        _num(m.delta, m.unit, True),
        floor,
        ratio_text(m),
        "-" if m.mde is None else _num(m.mde, m.unit),
        _verdict(m),
    ]


def _table(title: str, columns: tuple[str, ...]) -> Table:
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for i, col in enumerate(columns):
        # the name column wraps; numbers and verdicts never do
        t.add_column(
            col,
            justify="left" if i == 0 or col == "verdict" else "right",
            no_wrap=i > 0,
            overflow="fold" if i == 0 else "ellipsis",
        )
    return t


def _evidence(name: str, m: MetricResult) -> str:
    if m.ci95 is None:
        return f"{name}: {escape(m.reason)}"
    if m.floor_source == "threshold":
        low, high = m.ci95
        return f"{name}: {_verdict(m)}: {escape(m.reason)}; tuned share 95 % Wilson [{low:.1f}, {high:.1f}] %"
    ci = f"95 % CI [{_num(m.ci95[0], m.unit, True)}, {_num(m.ci95[1], m.unit, True)}]"
    floor = escape(m.floor_detail) if m.floor is not None else "no floor"
    metric = f" ({m.extra['metric']})" if "metric" in m.extra else ""
    return f"{name}{metric}: {_verdict(m)}: {escape(m.reason.split(' (')[0])}; {ci}; floor {floor}"


def render_gate(report: GateReport, console: Console) -> None:
    inp = report.inputs
    runs = f"{inp['base']['runs']} + {inp['tuned']['runs']} runs"
    console.print(
        f"tuned vs base on {inp['prompts']} shared prompts ({runs}, "
        f"{inp['base']['responses']} + {inp['tuned']['responses']} responses); floor = k x the run-to-run SD "
        f"within an arm, k = {inp['floor_k']:g}"
    )
    t = _table(
        "metrics (delta = tuned - base; % metrics in points; ratio = |delta| / floor; * = given floor)",
        ("metric", "base", "tuned", "delta", "floor", "ratio", "MDE", "verdict"),
    )
    for name, m in report.metrics.items():
        if m.extra.get("skipped"):
            t.add_row(name, *["-"] * 6, "skipped")
            continue
        t.add_row(*_row(m, name + (" %" if m.unit == "%" else "")))
        for part in m.parts:
            t.add_row(*_row(part, f"  {part.name}"))
    console.print(t)
    for name, m in report.metrics.items():
        console.print(_evidence(name, m))
    div = report.metrics["diversity"].extra
    if div.get("matched_tokens_median") is not None:
        console.print(
            f"diversity at matched length: median {div['matched_tokens_median']:.0f} tokens per response, "
            f"{div['samples_per_prompt']:.1f} samples per prompt and run"
        )
    mem = report.metrics["memorisation"]
    span = mem.extra.get("longest_span")
    if span:
        console.print(
            f"longest verbatim corpus span in the tuned arm: {span['tokens']} tokens (prompt "
            f"{escape(span['prompt_id'])!s}, run {escape(str(span['run']))}, sample {span['sample']}): "
            f'"{escape(span["text"][:160])}{"..." if len(span["text"]) > 160 else ""}"'
        )
    if report.probes:
        p = _table(
            "probes (k/n responses the detector fires on; delta in points; p: exact McNemar, paired)",
            ("probe", "base", "tuned", "delta", "floor", "ratio", "p", "verdict"),
        )
        for pr in report.probes:
            (kb, nb), (kt, nt) = pr.counts
            r = pr.result
            row = _row(r, pr.probe.name)
            p.add_row(
                row[0], f"{kb}/{nb}", f"{kt}/{nt}", row[3], row[4], row[5], f"{pr.mcnemar_p:.2g}", row[7]
            )
        console.print(p)
        for pr in report.probes:
            console.print(
                f"probe {escape(pr.probe.name)}: hypothesis {pr.held}: {escape(pr.probe.hypothesis)}"
            )
            console.print("  " + _evidence("evidence", pr.result))
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    console.print(
        f"verdict: [{_STYLE.get(report.verdict, 'yellow')}]{report.verdict}[/] (exit {report.exit_code})"
    )
