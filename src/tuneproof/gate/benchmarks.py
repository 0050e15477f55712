"""Benchmark results judged per document: each (task, filter, metric) of the two arms paired by doc_id,
against the arms' own run-to-run noise (Miller 2024, "Adding Error Bars to Evals": paired differences,
standard errors clustered by document, power).

- 2 or more runs per arm: the floor is k x the run-to-run SD of the arm's mean, as for every gate metric
  (`stats.measured_floor`), and the interval is the paired bootstrap over documents of the per-document
  difference of the arms' run means (clustered by document).
- 1 run in an arm: the run-to-run noise is not measured; the paired per-document test stands in: exact
  McNemar for 0/1 metrics, the paired bootstrap interval otherwise; the verdict says so.

Hypotheses (the spec's `[benchmarks]`): "not-worse" by more than a margin passes when the interval's worse
end stays above -margin (with no margin, the default: when the tuned arm is better beyond the floor, its
interval above 0) and fails when the whole interval lies below -margin, beyond the floor; "better" passes
beyond the floor with the interval above the margin (default 0), and fails on a drop beyond the floor.
Everything else is INCONCLUSIVE, with the documents or runs that would detect a floor-sized effect.
Groups (mmlu) are judged on their subtasks' documents pooled, as lm-eval weighs them by size; a group and
each task outside a group decide (one headline metric each), subtasks and other metrics are evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tuneproof.gate import stats
from tuneproof.gate.bench_lineup import BenchUnit, Lineup
from tuneproof.gate.probes import mcnemar_exact
from tuneproof.gate.spec import GateSpec
from tuneproof.gate.stats import FAIL, INCONCLUSIVE, PASS, Floor, MetricResult, verdict_for

AGREE = 1e-6  # per-document mean vs lm-eval's aggregate: relative tolerance (float sums)


@dataclass(slots=True)
class BenchLine:
    """One judged (task or group, filter, metric) and what it rests on."""

    unit: BenchUnit
    metric: str
    filter: str
    deciding: bool
    hypothesis: str
    margin: float | None
    test: str  # "floor" | "exact McNemar" | "paired bootstrap"
    result: MetricResult
    lm_eval: dict[str, list[float | None]]  # lm-eval's own figure per run of each arm (in `result.unit`)
    power: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.unit.name} {self.metric}" + ("" if self.filter == "none" else f" ({self.filter})")

    def to_dict(self) -> dict[str, Any]:
        out = self.result.to_dict()
        out.update(
            task=self.unit.name, kind=self.unit.kind, filter=self.filter, metric=self.metric,
            deciding=self.deciding, hypothesis=self.hypothesis, margin=self.margin, test=self.test,
            num_documents=self.result.num_prompts, lm_eval_aggregate=self.lm_eval, power=self.power,
            **self.extra,
        )  # fmt: skip
        return out


@dataclass(slots=True)
class Benchmarks:
    lines: list[BenchLine]
    notes: list[str]
    gated: bool

    def deciding(self) -> list[BenchLine]:
        return [line for line in self.lines if line.deciding] if self.gated else []


def judge_benchmarks(lineup: Lineup, spec: GateSpec) -> Benchmarks:
    """Every line of `lineup` (`bench_lineup.line_up` checked the arms) judged, with lm-eval's aggregates."""
    notes = list(lineup.notes)
    lines = []
    for unit in lineup.units:
        task_spec = spec.benchmarks.task(unit.name)
        headline = lineup.headline(unit, task_spec)
        for filt, metric in unit.rows:
            b, t = lineup.scores(unit, filt, metric)
            higher = lineup.higher(unit, metric, task_spec.higher_is_better)
            line = judge_line(unit, filt, metric, b, t, higher, task_spec.hypothesis or "not-worse",
                              task_spec.margin, spec.floor_k)  # fmt: skip
            line.deciding = unit.top and (filt, metric) == headline
            line.lm_eval = lineup.aggregates(unit, filt, metric, line.result.unit == "%")
            differs = _agreement(line, b, t)
            line.extra["lm_eval_differs"] = bool(differs)
            notes.extend(differs)
            if higher is None:
                line.extra["direction"] = "assumed higher is better (not in the results; the spec can say)"
            lines.append(line)
    for task, filt, metric, why in lineup.unjudged:
        notes.append(f"{task} {metric} ({filt}) not judged: {why}")
    return Benchmarks(lines, notes, spec.benchmarks.gate)


def judge_line(
    unit: BenchUnit,
    filt: str,
    metric: str,
    b: np.ndarray,
    t: np.ndarray,
    higher: bool | None,
    hypothesis: str,
    margin: float | None,
    k: float,
) -> BenchLine:
    """One line: runs x documents scores of both arms (documents in the same order)."""
    percent = bool(np.all((b >= 0) & (b <= 1)) and np.all((t >= 0) & (t <= 1)))
    binary = bool(np.all((b == 0) | (b == 1)) and np.all((t == 0) | (t == 1)))
    scale, unit_name = (100.0, "%") if percent else (1.0, "")
    b, t = b * scale, t * scale
    runs_ok = b.shape[0] >= 2 and t.shape[0] >= 2
    single = " and ".join(arm for arm, x in (("base", b), ("tuned", t)) if x.shape[0] < 2)
    single = "1 run per arm" if " and " in single else f"1 run in the {single} arm"
    if runs_ok:
        floor = stats.measured_floor(b, t, k, " pts" if percent else "")
        floor = Floor(
            floor.value, floor.source, floor.detail.replace("paired by prompt", "paired by document")
        )
        test = "floor"
    else:  # McNemar pairs one 0/1 outcome per document and arm: one run each
        test = "exact McNemar" if binary and b.shape[0] == t.shape[0] == 1 else "paired bootstrap"
        floor = Floor(None, "none", f"{single}: the {test} stands in for the floor")
    wanted = "down" if higher is False else "up"
    name = f"{unit.name} {metric}" + ("" if filt == "none" else f" ({filt})")
    result = stats.judge_metric(name, wanted, b, t, floor, unit=unit_name)
    line = BenchLine(unit, metric, filt, False, hypothesis, margin, test, result, {})
    if result.delta is None or result.ci95 is None:
        result.note = result.note.replace("prompt(s) have", "document(s) have")
        return line
    p_value = None
    if test == "exact McNemar":
        b0, t0 = b[0] / scale, t[0] / scale
        p_value = mcnemar_exact(int(np.sum((b0 == 1) & (t0 == 0))), int(np.sum((b0 == 0) & (t0 == 1))))
        line.extra["mcnemar_p"] = p_value
    sign = -1.0 if higher is False else 1.0
    gain = sign * result.delta
    lo, hi = sorted((sign * result.ci95[0], sign * result.ci95[1]))
    outcome, reason = _decide(hypothesis, gain, (lo, hi), floor.value, margin, p_value, result.unit)
    if not runs_ok:
        reason += f"; {single}, so the {test} stands in for the run-to-run floor"
    noise = floor.value
    result.judgement = verdict_for(outcome, reason, abs(gain) - noise if noise is not None else None, noise)
    result.note = ""
    if outcome == INCONCLUSIVE:
        line.power = _power(b, t, floor.value, margin, result.unit)
    return line


def _decide(
    hypothesis: str,
    gain: float,
    ci: tuple[float, float],
    floor: float | None,
    margin: float | None,
    p_value: float | None,
    unit: str,
) -> tuple[str, str]:
    """The verdict on the gain (delta signed so that > 0 is better) and its interval (low, high)."""
    lo, hi = ci
    pts = " pts" if unit == "%" else ""
    beyond = floor is None or abs(gain) > floor
    significant = p_value is None or p_value < 0.05
    past = "beyond the floor" if floor is not None else "the paired test rejects no change"
    where = f"change {gain:+.4g}{pts} (+ is better), 95 % CI [{lo:+.4g}, {hi:+.4g}]"
    if floor is not None:
        where += f", floor {floor:.4g}"
    if p_value is not None:
        where += f", McNemar p = {p_value:.3g}"
    if hypothesis == "not-worse":
        m = margin or 0.0
        if m > 0 and lo > -m:
            return PASS, f"not worse by more than {m:.4g}{pts}: the interval stays above -{m:.4g} ({where})"
        if m == 0 and lo > 0 and beyond and significant:
            return PASS, f"not worse: better, {past}, the whole interval above 0 ({where})"
        if gain < 0 and beyond and hi < -m and significant:
            return FAIL, f"worse{f' by more than {m:.4g}{pts}' if m else ''}, {past} ({where})"
        if not beyond:
            return INCONCLUSIVE, f"inside the floor ({where})"
        return INCONCLUSIVE, f"not shown within {m:.4g}{pts} of the base, nor worse by more ({where})"
    m = margin or 0.0
    if gain > 0 and beyond and lo > m and significant:
        return PASS, f"better{f' by more than {m:.4g}{pts}' if m else ''}, {past} ({where})"
    if gain < 0 and beyond and hi < 0 and significant:
        return FAIL, f"worse, {past} ({where})"
    if not beyond:
        return INCONCLUSIVE, f"inside the floor ({where})"
    return INCONCLUSIVE, f"not shown better ({where})"


def _power(b: np.ndarray, t: np.ndarray, floor: float | None, margin: float | None, unit: str) -> str:
    """The documents (and runs) that would detect a floor-sized effect at alpha 0.05, power 0.8."""
    effect = floor if floor else margin
    pts = " pts" if unit == "%" else ""
    if not effect:
        why = (
            "the floor is 0 (the runs agree exactly)" if floor == 0 else "there is no floor (1 run in an arm)"
        )
        return f"no effect size to plan for: {why} and no margin is given (the spec's margin sets one)"
    base_p, tuned_p = b.mean(axis=0), t.mean(axis=0)
    d = tuned_p - base_p
    n = d.size
    sd = float(np.std(d, ddof=1)) if n > 1 else 0.0
    what = "floor" if floor else "margin"
    if sd == 0:
        return "every document's difference is the same, so there is no spread to plan documents against"
    docs = math.ceil((stats.Z_ALPHA_POWER * sd / effect) ** 2)
    if docs <= n:
        return (
            f"these {n:,} documents can detect a {effect:.3g}{pts} effect (the {what}; {docs:,} would do): "
            "the change seen is smaller than that"
        )
    text = f"to detect a {effect:.3g}{pts} effect (the {what}): about {docs:,} documents at these runs"
    text += f" (now {n:,})"
    if b.shape[0] < 2 or t.shape[0] < 2:
        return text + "; 2 runs per arm would measure the run-to-run noise"
    w_b, w_t = float(np.var(b, axis=0, ddof=1).mean()), float(np.var(t, axis=0, ddof=1).mean())
    between = max(sd**2 - w_b / b.shape[0] - w_t / t.shape[0], 0.0)
    target = (effect * math.sqrt(n) / stats.Z_ALPHA_POWER) ** 2
    if target <= between or w_b + w_t == 0:
        return text + "; more runs alone cannot: the documents' own spread is too large"
    runs = math.ceil((w_b + w_t) / (target - between))
    return text + f", or {runs} runs per arm at these documents (now {b.shape[0]} + {t.shape[0]})"


def _agreement(line: BenchLine, b: np.ndarray, t: np.ndarray) -> list[str]:
    """lm-eval's figure of each run against the run's per-document mean: a mismatch is called out."""
    out = []
    scale = 100.0 if line.result.unit == "%" else 1.0
    for arm, scores in (("base", b), ("tuned", t)):
        for i, figure in enumerate(line.lm_eval.get(arm, [])):
            if figure is None:
                continue
            mean = float(scores[i].mean()) * scale
            if abs(mean - figure) > AGREE * max(1.0, abs(figure)):
                out.append(
                    f"{line.name}: run {i + 1} of the {arm} arm: lm-eval's aggregate {figure:.6g} differs "
                    f"from the per-document mean {mean:.6g}{line.unit.aggregate_note}"
                )
    return out
