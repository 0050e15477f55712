"""The gate as tables: one row per metric with both arms, the delta, the floor it was judged against, the
ratio, the smallest effect the gate could have called, and the verdict; then the evidence in words.

Verdicts in capitals decide the exit code (each family's headline metric, each probe); lower-case ones
are evidence (a family's parts, a family the spec reports without gating). Below 80 columns the tables
become one line per metric."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape

from tuneproof.gate.metrics import ATTRACTORS, DIVERSITY, MEMORISATION
from tuneproof.gate.probes import wilson
from tuneproof.gate.stats import FAIL, PASS, MetricResult, ratio_text

if TYPE_CHECKING:
    from rich.console import Console

    from tuneproof.gate.benchmarks import BenchLine, Benchmarks
    from tuneproof.gate.judge import GateReport, JudgedProbe

_STYLE = {PASS: "green", FAIL: "bold red"}
_ARROW = {"up": "↑", "down": "↓", "no-change": "="}
NARROW = 80
MAX_SPANS_SHOWN = 5


def _num(x: float | None, unit: str, signed: bool = False) -> str:
    """3 decimals for ratios in [0, 1]-ish units; 1 decimal for percent (deltas of percent are points)."""
    if x is None:
        return "-"
    if unit:
        return f"{x:+.1f}" if signed else f"{x:.1f}"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _verdict(m: MetricResult, gated: bool = True) -> str:
    if m.verdict is None:
        return "not judged"
    if not gated:
        return f"[dim]{m.verdict.lower()}[/]"
    return f"[{_STYLE.get(m.verdict, 'yellow')}]{m.verdict}[/]"


def _cells(m: MetricResult, name: str, gated: bool) -> list[str]:
    floor = "-" if m.floor is None else _num(m.floor, m.unit)
    if m.floor_source == "given":
        floor += "*"
    elif m.floor_source == "threshold":
        floor = f"≤{floor}"
    return [
        f"{name} {_ARROW.get(m.wanted, '')}",
        _num(m.base, m.unit),
        _num(m.tuned, m.unit),
        _num(m.delta, m.unit, True),
        floor,
        ratio_text(m),
        "-" if m.mde is None else _num(m.mde, m.unit),
        _verdict(m, gated),
    ]


def _table(title: str, columns: tuple[str, ...], rows: list[list[str]], console: Console) -> None:
    """A table at 72 columns or more; below, one line per row (`name: column value, ...`)."""
    if console.width < NARROW:
        console.print(title)
        for row in rows:
            console.print(
                f"{row[0].strip()}: "
                + ", ".join(f"{c} {v}" for c, v in zip(columns[1:], row[1:], strict=True))
            )
        return
    from tuneproof.core.tables import Table

    t = Table(title=title, padding=0)
    for i, col in enumerate(columns):
        # the name column wraps (between words where it can); numbers and verdicts never do
        t.add_column(col, justify="left" if i == 0 or col == "verdict" else "right", no_wrap=i > 0)
    for row in rows:
        t.add_row(*row)
    console.print(t)


def _evidence(name: str, m: MetricResult, gated: bool = True) -> str:
    if m.ci95 is None:
        return f"{name}: {escape(m.reason)}"
    if m.floor_source == "threshold":
        low, high = m.ci95
        wilson_ci = f"tuned share 95 % Wilson [{low:.1f}, {high:.1f}] %"
        return f"{name}: {_verdict(m, gated)}: {escape(m.reason)}; {wilson_ci}"
    ci = f"95 % CI [{_num(m.ci95[0], m.unit, True)}, {_num(m.ci95[1], m.unit, True)}]"
    floor = escape(m.floor_detail) if m.floor is not None else "no floor"
    metric = f" ({m.extra['metric']})" if "metric" in m.extra else ""
    return f"{name}{metric}: {_verdict(m, gated)}: {escape(_without_numbers(m.reason))}; {ci}; floor {floor}"


def _without_numbers(reason: str) -> str:
    """The reason less its first parenthesis (the numbers the line shows anyway), nested ones included."""
    start = reason.find(" (")
    if start < 0:
        return reason
    depth = 0
    for i in range(start + 1, len(reason)):
        depth += {"(": 1, ")": -1}.get(reason[i], 0)
        if depth == 0:
            return reason[:start] + reason[i + 1 :]
    return reason[:start]


def _header(report: GateReport) -> str:
    inp = report.inputs
    b, t = inp["base"], inp["tuned"]
    return (
        f"tuned vs base on {inp['prompts']} shared prompts ({b['runs']} + {t['runs']} runs, "
        f"{b['responses_judged']} + {t['responses_judged']} responses judged); a verdict rests on its 95 % "
        f"interval (prompts paired, runs carried); floors are k x the run-to-run SD within an arm "
        f"(k = {inp['floor_k']:g}) unless marked given (*), and must be beaten only "
        + ("as the spec's practical_floor asks" if inp.get("practical_floor") else "where given")
    )


def _metrics(report: GateReport, console: Console) -> None:
    rows = []
    for name, m in report.metrics.items():
        gated = bool(m.extra.get("gated", True))
        if m.extra.get("skipped"):
            rows.append([name, *["-"] * 6, "skipped"])
            continue
        rows.append(_cells(m, name + (" %" if m.unit == "%" else ""), gated))
        rows.extend(_cells(part, f"  {part.name}", gated=False) for part in m.parts)
    _table(
        "metrics: delta = tuned - base (of % metrics, in points); ratio = |delta| / floor; VERDICTS in "
        "capitals decide the exit code, lower-case ones are evidence",
        ("metric", "base", "tuned", "delta", "floor", "ratio", "MDE", "verdict"),
        rows,
        console,
    )
    for name, m in report.metrics.items():
        console.print(_evidence(name, m, bool(m.extra.get("gated", True))))


def _inputs(report: GateReport, console: Console) -> None:
    div = report.metrics[DIVERSITY.name].extra
    if div.get("matched_tokens_median") is not None:
        console.print(
            f"diversity at matched length: median {div['matched_tokens_median']:.0f} tokens per response, "
            f"{div['samples_per_prompt']:.1f} samples per prompt and run"
        )
    att = report.metrics[ATTRACTORS.name].extra
    if "list_sha256" in att:
        console.print(f"attractors: {att['num_phrases']} phrases, list sha256 {att['list_sha256'][:16]}...")
    mem = report.metrics[MEMORISATION.name].extra
    if "k" in mem:
        console.print(
            f"memorisation: spans of {mem['k']} tokens ({escape(mem['tokens'])}) against a corpus of "
            f"{mem['corpus_tokens']:,} tokens; index {escape(mem['index'])}"
        )
    spans: list[dict[str, Any]] = mem.get("spans") or []
    for i, span in enumerate(spans[:MAX_SPANS_SHOWN]):
        where = f"prompt {escape(span['prompt_id'])}, run {escape(str(span['run']))}, sample {span['sample']}"
        text = span.get("text")
        quote = f': "{escape(text[:160])}{"..." if len(text) > 160 else ""}"' if text else ""
        which = "longest" if i == 0 else "also a"
        console.print(f"{which} corpus span in the tuned arm: {span['tokens']} tokens ({where}){quote}")
    if len(spans) > MAX_SPANS_SHOWN:
        console.print(
            f"... and {len(spans) - MAX_SPANS_SHOWN} more tuned responses with a corpus span "
            "(all in the JSON report)"
        )


def _probe_line(pr: JudgedProbe) -> str:
    (kb, nb), (kt, nt) = pr.counts
    wb, wt = wilson(kb, nb), wilson(kt, nt)
    return (
        f"  base {kb}/{nb} (95 % Wilson {100 * wb[0]:.1f}-{100 * wb[1]:.1f} %), tuned {kt}/{nt} "
        f"({100 * wt[0]:.1f}-{100 * wt[1]:.1f} %), McNemar p = {pr.mcnemar_p:.2g}"
    )


def _probes(report: GateReport, console: Console) -> None:
    rows = []
    for pr in report.probes:
        (kb, nb), (kt, nt) = pr.counts
        cells = _cells(pr.result, pr.probe.name, gated=True)
        rows.append([cells[0], f"{kb}/{nb}", f"{kt}/{nt}", *cells[3:6], f"{pr.mcnemar_p:.2g}", cells[7]])
    _table(
        "probes: k/n responses the detector fires on; delta in points; p: exact McNemar on paired responses",
        ("probe", "base", "tuned", "delta", "floor", "ratio", "p", "verdict"),
        rows,
        console,
    )
    for pr in report.probes:
        console.print(f"probe {escape(pr.probe.name)}: hypothesis {pr.held}: {escape(pr.probe.hypothesis)}")
        console.print(_probe_line(pr))
        console.print("  " + _evidence("evidence", pr.result))


def render_gate(report: GateReport, console: Console) -> None:
    if report.benchmarks is not None:
        runs = report.inputs["benchmark_runs"]
        docs = report.inputs["benchmark_documents"]
        n, k = sum(docs.values()), len(docs)
        console.print(
            f"benchmarks: tuned vs base on {n:,} document{'s' * (n != 1)} in {k} task{'s' * (k != 1)} "
            f"({runs['base']} + {runs['tuned']} runs)"
        )
        render_benchmarks(report.benchmarks, console)
    if all(m.extra.get("skipped") for m in report.metrics.values()) and report.benchmarks is not None:
        console.print(f"response metrics: {escape(report.metrics[DIVERSITY.name].reason)}")
    else:
        console.print(_header(report))
        _metrics(report, console)
        _inputs(report, console)
    if report.probes:
        _probes(report, console)
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    console.print(
        f"verdict: [{_STYLE.get(report.verdict, 'yellow')}]{report.verdict}[/] (exit {report.exit_code})"
    )


# The benchmark lines as a table, one row per (task or group, filter, metric), then the evidence of each
# deciding line in words: its hypothesis, interval, test, lm-eval's own figures and, when it is
# inconclusive, the documents or runs that would decide it.
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
