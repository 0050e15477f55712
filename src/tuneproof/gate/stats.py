"""The floor and the verdict: every metric judged against the run-to-run noise of the instrument itself.

Inputs are per-prompt scores, one row per run: `base_RP` (runs x prompts) and `tuned_RP`, NaN where a
prompt has no value in a run. A prompt's score in an arm is its mean over runs.

- delta: mean over prompts of (tuned - base), paired by prompt.
- noise: within one arm, run i vs run j of the same model, paired by prompt. The SD of that A/A
  difference of the arm's metric is sd(d_p) / sqrt(n) (standard error clustered by prompt: a prompt's
  samples are averaged first). Pooled as the root mean square over both arms and every pair of runs.
- floor = k x noise (k = 2 by default), or a value the user gave (and then it says "given").
- ci95: paired bootstrap over prompts of the delta (2,000 resamples, fixed seed).
- mde: the smallest delta the gate could call: the larger of the floor and the paired test's minimum
  detectable effect at alpha 0.05 and power 0.8, (z_0.975 + z_0.8) * sd(tuned_p - base_p) / sqrt(n).

Verdicts (`tuneproof.core.verdict.Verdict`, outcome words and exit codes in `EXIT`): PASS (beyond the floor,
the wanted way, interval excludes 0), FAIL (beyond the floor, the wrong way, interval excludes 0),
INCONCLUSIVE (inside the floor, or the interval spans 0). For a "no-change" expectation, PASS means the
whole interval lies inside +-floor. A verdict's `noise` is the floor and its `margin` is |delta| - floor
(negative: inside the floor); a metric with no floor, or fewer than 2 prompts, has no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tuneproof.core.verdict import CANNOT_JUDGE, FINDING, OK, Verdict

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
    return Verdict(outcome, reason, EXIT[outcome], margin, noise)


@dataclass(slots=True)
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
) -> MetricResult:
    """The verdict on one metric from per-prompt scores of both arms (see the module docstring).

    `test` is an extra paired test (name, p-value) that must also be below 0.05 for PASS or FAIL."""
    assert wanted in WANTED, wanted
    with np.errstate(all="ignore"):
        base_p = _nanmean_rows(base_RP)
        tuned_p = _nanmean_rows(tuned_RP)
    ok = np.isfinite(base_p) & np.isfinite(tuned_p)
    n = int(ok.sum())
    result = MetricResult(
        name, wanted, unit, None, None, None, floor.value, floor.source, floor.detail,
        None, None, None, n, None,
    )  # fmt: skip
    if n < 2:
        result.note = f"not judged: {n} prompt(s) have a value in both arms (need >= 2)"
        return result
    d = tuned_p[ok] - base_p[ok]
    result.base, result.tuned = float(base_p[ok].mean()), float(tuned_p[ok].mean())
    result.delta = delta = float(d.mean())
    result.ci95 = ci = paired_ci95(d)
    sd_d = float(np.std(d, ddof=1))
    stat_mde = Z_ALPHA_POWER * sd_d / math.sqrt(n)
    if floor.value is None:
        result.mde = stat_mde
        result.note = floor.detail
        return result
    result.mde = max(floor.value, stat_mde)
    result.ratio = abs(delta) / floor.value if floor.value > 0 else None
    outcome, reason = _verdict(wanted, delta, floor.value, ci, test)
    result.judgement = verdict_for(outcome, reason, margin=abs(delta) - floor.value, noise=floor.value)
    return result


def _nanmean_rows(scores: np.ndarray) -> np.ndarray:
    finite = np.isfinite(scores)
    counts = finite.sum(axis=0)
    sums = np.where(finite, scores, 0.0).sum(axis=0)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _verdict(
    wanted: str, delta: float, floor: float, ci: tuple[float, float], test: tuple[str, float] | None
) -> tuple[str, str]:
    beyond = abs(delta) > floor
    excludes_zero = ci[0] > 0 or ci[1] < 0
    where = f"delta {delta:+.4g} vs floor {floor:.4g}, 95 % CI [{ci[0]:+.4g}, {ci[1]:+.4g}]"
    significant = test is None or test[1] < 0.05
    test_note = f", {test[0]} p = {test[1]:.3g}" if test else ""
    if wanted == "no-change":
        if floor > 0 and -floor <= ci[0] and ci[1] <= floor:
            return PASS, f"no change: the whole interval lies inside +-floor ({where}{test_note})"
        if beyond and excludes_zero and significant:
            return FAIL, f"changed beyond the floor ({where}{test_note})"
        return INCONCLUSIVE, f"neither shown unchanged nor changed ({where}{test_note})"
    if not beyond:
        return INCONCLUSIVE, f"inside the floor ({where})"
    if not excludes_zero:
        return INCONCLUSIVE, f"the interval spans 0 ({where})"
    if not significant:
        return INCONCLUSIVE, f"the paired test does not reject no change ({where}{test_note})"
    good = delta > 0 if wanted == "up" else delta < 0
    return (
        (PASS, f"beyond the floor, the wanted way ({where}{test_note})")
        if good
        else (
            FAIL,
            f"beyond the floor, the wrong way ({where}{test_note})",
        )
    )


def ratio_text(result: MetricResult) -> str:
    """`delta / floor` as people say it: "22x"."""
    if result.ratio is None:
        return "-"
    return f"{result.ratio:.0f}x" if result.ratio >= 10 else f"{result.ratio:.1f}x"
