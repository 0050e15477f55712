"""The benchmark lines as a table, one row per (task or group, filter, metric), then the evidence of each
deciding line in words: its hypothesis, interval, test, lm-eval's own figures and, when it is
inconclusive, the documents or runs that would decide it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from tuneproof.gate.render import _cells, _num, _table, _verdict

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.gate.benchmarks import BenchLine, Benchmarks

SUBTASKS_SHOWN = 10  # a group's subtasks listed in the table; beyond, counted


def _agrees(line: BenchLine) -> str:
    """ "same" when every run's lm-eval figure is its per-document mean, "differs", or "-" (no results)."""
    figures = [f for arm in ("base", "tuned") for f in line.lm_eval.get(arm, [])]
    if not figures or all(f is None for f in figures):
        return "-"
    return "differs" if line.extra.get("lm_eval_differs") else "same"


def _figures(line: BenchLine) -> str:
    parts = []
    for arm in ("base", "tuned"):
        shown = ["-" if f is None else _num(f, line.result.unit) for f in line.lm_eval.get(arm, [])]
        parts.append(f"{arm} {', '.join(shown)}")
    return "lm-eval's own figures per run: " + "; ".join(parts)


def render_benchmarks(bench: Benchmarks, console: Console) -> None:
    rows = []
    groups = {task: u.name for u in (x.unit for x in bench.lines) if u.kind == "group" for task in u.tasks}
    shown: dict[str, set[str]] = {}  # group -> subtasks in the table
    hidden: dict[str, list[str]] = {}  # group -> verdicts of the subtasks left out
    for line in bench.lines:
        if line.unit.kind == "subtask":
            group = groups.get(line.unit.name, "")
            listed = shown.setdefault(group, set())
            if line.unit.name not in listed and len(listed) >= SUBTASKS_SHOWN:
                hidden.setdefault(group, []).append(str(line.result.verdict).lower())
                continue
            listed.add(line.unit.name)
        indent = "  " if line.unit.kind == "subtask" or not line.deciding else ""
        unit = " %" if line.result.unit == "%" else ""
        cells = _cells(line.result, f"{indent}{escape(line.name)}{unit}", bench.gated and line.deciding)
        rows.append([*cells[:7], _agrees(line), cells[7]])
    _table(
        "benchmarks: per-document means paired by doc_id; delta = tuned - base (of % metrics, in points); "
        "lm-eval: its own aggregate against the per-document mean",
        ("benchmark", "base", "tuned", "delta", "floor", "ratio", "MDE", "lm-eval", "verdict"),
        rows,
        console,
    )
    for group, verdicts in hidden.items():
        counts = {v: verdicts.count(v) for v in dict.fromkeys(verdicts)}
        console.print(
            f"  ... {len(verdicts)} more subtasks of {escape(group)}: "
            + ", ".join(f"{n} {v}" for v, n in counts.items())
            + " (every line is in the JSON report)"
        )
    for line in bench.lines:
        if not line.deciding:
            continue
        console.print(
            f"{escape(line.name)}: {_verdict(line.result, bench.gated)}: hypothesis {line.hypothesis}; "
            f"{escape(line.result.reason)}"
        )
        if any(f is not None for arm in line.lm_eval.values() for f in arm):
            console.print(f"  {_figures(line)}")
        if line.power:
            console.print(f"  power: {escape(line.power)}")
        if "direction" in line.extra:
            console.print(f"  direction: {escape(line.extra['direction'])}")
    if not bench.gated:
        console.print("note: benchmarks reported, not gated (gate = false under [benchmarks] in the spec)")
    for note in bench.notes:
        console.print(f"note: {escape(note)}")
