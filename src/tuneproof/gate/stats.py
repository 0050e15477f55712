"""The verdict on one metric: the estimator's own interval decides; the instrument's run-to-run floor is
shown beside it, an equivalence band for "no change", and a bar to beat only where asked.

Inputs are per-prompt scores, one row per run: `base_RP` (runs x prompts) and `tuned_RP`, NaN where a
prompt has no value in a run. A prompt's score in an arm is its mean over runs.

- delta: mean over prompts of (tuned - base), paired by prompt.
- ci95 (`estimate`): with 2 or more runs per arm, delta +- t * SE, SE clustered by prompt with the
  run-to-run variance carried (`gate.clustered`), so that more prompts and more runs both narrow it;
  with one run in an arm, the paired bootstrap over prompts (2,000 resamples, fixed seed).
- noise (the floor): within one arm, run i vs run j of the same model, paired by prompt; the SD of that
  A/A difference of the arm's metric, sd(d_p) / sqrt(n), pooled as the root mean square over both arms
  and every pair of runs. floor = k x noise (k = 2 by default), or a value the user gave ("given").
  It is the run-to-run spread of a single run, not the uncertainty of delta (a mean over runs), so it
  does not decide significance: a given floor must be beaten as well, a measured one only where the
  spec's practical_floor asks.
- mde: the smallest true change the test as applied detects with probability 0.8 at alpha 0.05
  (`clustered.mde`), and at least a floor that must be beaten.

Verdicts (`tuneproof.core.verdict.Verdict`, outcome words and exit codes in `EXIT`): PASS (the interval
excludes 0, the wanted way, beyond any floor to beat), FAIL (the same, the wrong way), INCONCLUSIVE
otherwise. For a "no-change" expectation, PASS means the whole interval lies inside +-floor. A verdict's
`noise` is the interval's half-width and its `margin` is |delta| minus it. Several verdicts deciding
together are corrected by Holm's step-down (`holm_correct`). A metric with fewer than 2 prompts, or one
run and no floor, has no verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tuneproof.core.quantiles import t_quantile
from tuneproof.core.verdict import CANNOT_JUDGE, FINDING, OK, Verdict
from tuneproof.gate import clustered

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
EXIT = {PASS: OK, FAIL: FINDING, INCONCLUSIVE: CANNOT_JUDGE}  # each outcome's exit code
WANTED = ("up", "down", "no-change")
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
Z_ALPHA_POWER = 1.959964 + 0.841621  # z_{0.975} + z_{0.80}
DEFAULT_FLOOR_K = 2.0


@dataclass(frozen=True, slots=True)
class Floor:
    """The noise a delta is judged against: `value` (None when there is none) and where it came from."""

    value: float | None
    source: str  # "measured" | "given" | "none" | "threshold"
    detail: str

    @staticmethod
    def given(value: float) -> Floor:
        return Floor(value, "given", f"given ({value:g}), not measured")


def verdict_for(
    outcome: str, reason: str, margin: float | None = None, noise: float | None = None
) -> Verdict:
    """A gate verdict: the outcome word, its reason, and the exit code the outcome carries (`EXIT`)."""
    return Verdict(outcome=outcome, reason=reason, exit_code=EXIT[outcome], margin=margin, noise=noise)


@dataclass(kw_only=True, slots=True)
class MetricResult:
    """One metric of one family: both arms, the delta and the verdict with the numbers it rests on.

    `judgement` is the verdict (None: reported, not judged, and `note` says why); `verdict` and
    `reason` read it as the JSON report writes them (the outcome word, or None, and one sentence)."""

    name: str
    wanted: str
    unit: str
    base: float | None
    tuned: float | None
    delta: float | None
    floor: float | None
    floor_source: str
    floor_detail: str
    ratio: float | None
    ci95: tuple[float, float] | None
    mde: float | None
    num_prompts: int
    judgement: Verdict | None  # None: reported, not judged
    note: str = ""  # why there is no verdict
    parts: list[MetricResult] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str | None:
        return self.judgement.outcome if self.judgement is not None else None

    @property
    def reason(self) -> str:
        return self.judgement.reason if self.judgement is not None else self.note

    def prefix_reason(self, text: str) -> None:
        """Put `text` before the reason (a family reported without gating says so first)."""
        if self.judgement is not None:
            self.judgement = replace(self.judgement, reason=text + self.judgement.reason)
        else:
            self.note = text + self.note

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "wanted": self.wanted,
            "unit": self.unit,
            "base": self.base,
            "tuned": self.tuned,
            "delta": self.delta,
            "floor": self.floor,
            "floor_source": self.floor_source,
            "floor_detail": self.floor_detail,
            "ratio": self.ratio,
            "ci95": list(self.ci95) if self.ci95 else None,
            "mde": self.mde,
            "num_prompts": self.num_prompts,
            "verdict": self.verdict,
            "reason": self.reason,
        }
        out.update(self.extra)
        if self.parts:
            out["parts"] = {p.name: p.to_dict() for p in self.parts}
        return out


def noise_sd(*arms_RP: np.ndarray) -> tuple[float | None, int]:
    """SD of the run-to-run difference of an arm's metric (clustered by prompt), pooled over arms and pairs
    of runs; None when no arm has two runs sharing two prompts. Returns (sd, number of run pairs used)."""
    variances: list[float] = []
    for scores in arms_RP:
        for i in range(scores.shape[0]):
            for j in range(i + 1, scores.shape[0]):
                ok = np.isfinite(scores[i]) & np.isfinite(scores[j])
                n = int(ok.sum())
                if n >= 2:
                    d = scores[i, ok] - scores[j, ok]
                    variances.append(float(np.var(d, ddof=1)) / n)
    if not variances:
        return None, 0
    return math.sqrt(sum(variances) / len(variances)), len(variances)


def measured_floor(base_RP: np.ndarray, tuned_RP: np.ndarray, k: float, unit: str = "") -> Floor:
    sd, num_pairs = noise_sd(base_RP, tuned_RP)
    runs = f"{base_RP.shape[0]} + {tuned_RP.shape[0]} runs"
    if sd is None:
        return Floor(None, "none", f"no floor: need >= 2 runs per arm ({runs}) or a given floor")
    return Floor(
        k * sd,
        "measured",
        f"{k:g} x run-to-run SD {sd:.4g}{unit} ({runs}, {num_pairs} A/A pairs, paired by prompt)",
    )


def paired_ci95(d: np.ndarray, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of mean(d), resampling prompts."""
    rng = np.random.default_rng(seed)
    n = d.size
    values, counts = np.unique(d, return_counts=True)
    if values.size <= 64:  # few distinct differences (0/1 scores): resample their counts, the same law
        draws = rng.multinomial(n, counts / n, size=BOOTSTRAP_RESAMPLES)
        low, high = np.percentile(draws @ values / n, [2.5, 97.5])
        return float(low), float(high)
    means = np.empty(BOOTSTRAP_RESAMPLES)
    chunk = max(1, 2_000_000 // max(n, 1))
    for lo in range(0, BOOTSTRAP_RESAMPLES, chunk):
        hi = min(lo + chunk, BOOTSTRAP_RESAMPLES)
        means[lo:hi] = d[rng.integers(0, n, size=(hi - lo, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def judge_metric(
    name: str,
    wanted: str,
    base_RP: np.ndarray,
    tuned_RP: np.ndarray,
    floor: Floor,
    *,
    unit: str = "",
    test: tuple[str, float] | None = None,
    practical: bool = False,
) -> MetricResult:
    """The verdict on one metric from per-prompt scores of both arms (see the module docstring).

    `test` is an extra paired test (name, p-value) that must also be below 0.05 for PASS or FAIL.
    `practical`: the measured floor must be beaten as well (a given floor always must)."""
    assert wanted in WANTED, wanted
    with np.errstate(all="ignore"):
        base_p = _nanmean_rows(base_RP)
        tuned_p = _nanmean_rows(tuned_RP)
    ok = np.isfinite(base_p) & np.isfinite(tuned_p)
    n = int(ok.sum())
    result = MetricResult(
        name=name, wanted=wanted, unit=unit, base=None, tuned=None, delta=None, floor=floor.value,
        floor_source=floor.source, floor_detail=floor.detail, ratio=None, ci95=None, mde=None, num_prompts=n,
        judgement=None,
    )  # fmt: skip
    if n < 2:
        result.note = f"not judged: {n} prompt(s) have a value in both arms (need >= 2)"
        return result
    d = tuned_p[ok] - base_p[ok]
    result.base, result.tuned = float(base_p[ok].mean()), float(tuned_p[ok].mean())
    result.delta = delta = float(d.mean())
    est = estimate(base_RP, tuned_RP, ok)
    result.ci95 = ci = est.ci95
    result.mde = clustered.mde(est.se, est.df)
    result.extra["test"] = est.test
    result.extra["se"] = est.se
    result.extra["p_value"] = max(est.p_value, test[1]) if test else est.p_value
    if floor.value is None and est.test != "clustered t":  # one run: nothing measures the run-to-run noise
        result.note = floor.detail
        return result
    bar = floor.value if floor.value is not None and (practical or floor.source == "given") else None
    result.mde = clustered.mde(est.se, est.df, bar)
    result.ratio = abs(delta) / floor.value if floor.value else None
    outcome, reason = _verdict(wanted, delta, floor.value, bar, ci, test)
    if wanted == "no-change" and outcome == PASS and floor.value:  # the claim is equivalence: its own p
        result.extra["p_value"] = clustered.equivalence_p(delta, est.se, est.df, floor.value)
    half = (ci[1] - ci[0]) / 2
    result.judgement = verdict_for(outcome, reason + est.shift_note, margin=abs(delta) - half, noise=half)
    return result


@dataclass(kw_only=True, frozen=True, slots=True)
class DeltaEstimate:
    """The interval a verdict reads: clustered t with 2+ runs per arm, else the paired bootstrap."""

    ci95: tuple[float, float]
    se: float
    df: float
    p_value: float
    test: str  # "clustered t" | "paired bootstrap"
    shift: bool = False  # a run shift is counted (gate.clustered): the runs are the units that narrow it

    @property
    def shift_note(self) -> str:
        """What a counted run shift means for the interval, for the verdict's reason ("" without one)."""
        if not self.shift:
            return ""
        return (
            f"; the runs shift as a whole beyond the documents' own noise (F test), so the interval carries "
            f"it with {self.df:.1f} df: more runs per arm narrow it, more documents hardly"
        )


def estimate(base_RP: np.ndarray, tuned_RP: np.ndarray, ok: np.ndarray) -> DeltaEstimate:
    """delta's interval over the prompts in `ok` (finite in both arms): with 2 or more runs per arm the
    clustered standard error with the run-to-run variance (`gate.clustered`) and a t interval; with one
    run the paired bootstrap interval and the paired t p-value."""
    with np.errstate(all="ignore"):
        d = (_nanmean_rows(tuned_RP) - _nanmean_rows(base_RP))[ok]
    n = d.size
    sd = float(np.std(d, ddof=1))
    df: float = n - 1
    if base_RP.shape[0] >= 2 and tuned_RP.shape[0] >= 2:
        complete = ok & np.isfinite(base_RP).all(axis=0) & np.isfinite(tuned_RP).all(axis=0)
        runs = (base_RP.shape[0], tuned_RP.shape[0])
        parts = [(sd**2 / n, n - 1)]
        if complete.sum() >= 2:
            shift = clustered.run_variance(base_RP[:, complete], tuned_RP[:, complete])
            parts.append((shift * (1 / runs[0] + 1 / runs[1]), clustered.shift_df(runs)))
        se = math.sqrt(sum(v for v, _ in parts))
        df = clustered.satterthwaite(parts)
        half = t_quantile(df, 1 - clustered.ALPHA) * se
        delta = float(d.mean())
        p = clustered.p_value(delta, se, df)
        return DeltaEstimate(
            ci95=(delta - half, delta + half),
            se=se,
            df=df,
            p_value=p,
            test="clustered t",
            shift=any(v > 0 for v, _ in parts[1:]),
        )
    se = sd / math.sqrt(n)
    return DeltaEstimate(
        ci95=paired_ci95(d),
        se=se,
        df=df,
        p_value=clustered.p_value(float(d.mean()), se, df),
        test="paired bootstrap",
    )


def _nanmean_rows(scores: np.ndarray) -> np.ndarray:
    finite = np.isfinite(scores)
    counts = finite.sum(axis=0)
    sums = np.where(finite, scores, 0.0).sum(axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _verdict(
    wanted: str,
    delta: float,
    floor: float | None,
    bar: float | None,
    ci: tuple[float, float],
    test: tuple[str, float] | None,
) -> tuple[str, str]:
    """`floor`: the measured (or given) run-to-run floor, the equivalence band of a no-change claim;
    `bar`: the part of it a change must also beat (a given floor, or the measured one when practical)."""
    excludes_zero = ci[0] > 0 or ci[1] < 0
    floor_text = f", floor {floor:.4g}" + (" (must be beaten)" if bar is not None else "") if floor else ""
    where = f"delta {delta:+.4g}, 95 % CI [{ci[0]:+.4g}, {ci[1]:+.4g}]{floor_text}"
    significant = test is None or test[1] < 0.05
    test_note = f", {test[0]} p = {test[1]:.3g}" if test else ""
    beyond = bar is None or abs(delta) > bar
    if wanted == "no-change":
        if floor and -floor <= ci[0] and ci[1] <= floor:
            return PASS, f"no change: the whole interval lies inside +-floor ({where}{test_note})"
        if excludes_zero and beyond and significant:
            return FAIL, f"changed: the interval excludes 0 ({where}{test_note})"
        return INCONCLUSIVE, f"neither shown unchanged nor changed ({where}{test_note})"
    if ci == (0.0, 0.0) and delta == 0:
        way = "higher" if wanted == "up" else "lower"
        return (
            INCONCLUSIVE,
            f"no difference: every prompt scores the same in both arms, so not {way} ({where})",
        )
    if not excludes_zero:
        return INCONCLUSIVE, f"the interval spans 0 ({where})"
    if not beyond:
        return INCONCLUSIVE, f"inside the floor the spec asks to beat ({where})"
    if not significant:
        return INCONCLUSIVE, f"the paired test does not reject no change ({where}{test_note})"
    good = delta > 0 if wanted == "up" else delta < 0
    return (
        (PASS, f"the interval excludes 0, the wanted way ({where}{test_note})")
        if good
        else (FAIL, f"the interval excludes 0, the wrong way ({where}{test_note})")
    )


def holm_family(judged: Mapping[str, MetricResult]) -> dict[str, MetricResult]:
    """The verdicts Holm's correction runs over: those resting on a test (a p-value of their claim)."""
    return {n: m for n, m in judged.items() if m.judgement is not None and m.extra.get("p_value") is not None}


def holm_correct(judged: dict[str, MetricResult]) -> list[str]:
    """Holm's step-down over the p-values of the verdicts that decide together (`extra["p_value"]`, the
    p-value of the claim the verdict makes: a change, or for "no change" equivalence inside the floor; a
    verdict not resting on a test, a threshold's say, has none): a PASS or FAIL that stands alone but
    not after the correction becomes INCONCLUSIVE, saying so. Returns the notes."""
    tested = holm_family(judged)
    if len(tested) < 2:
        return []
    adjusted = clustered.holm([float(m.extra["p_value"]) for m in tested.values()])
    demoted = []
    for (name, m), p_adj in zip(tested.items(), adjusted, strict=True):
        m.extra["p_holm"] = p_adj
        verdict = m.judgement
        assert verdict is not None
        if verdict.outcome in (PASS, FAIL) and p_adj >= clustered.ALPHA:
            m.judgement = verdict_for(
                INCONCLUSIVE,
                f"{verdict.outcome} alone (p = {m.extra['p_value']:.3g}), not after Holm's correction over "
                f"the {len(tested)} verdicts deciding together (adjusted p = {p_adj:.3g}): {verdict.reason}",
                verdict.margin,
                verdict.noise,
            )
            demoted.append(name)
    note = f"{len(tested)} verdicts decide together: Holm's step-down correction over their p-values"
    return [note + (f"; not significant after it: {', '.join(demoted)}" if demoted else "")]


def ratio_text(result: MetricResult) -> str:
    """`delta / floor` as people say it: "22x"."""
    if result.ratio is None:
        return "-"
    return f"{result.ratio:.0f}x" if result.ratio >= 10 else f"{result.ratio:.1f}x"
