"""The estimator every gate decides with: the paired difference of per-document (per-prompt) means over
the runs of each arm, and its standard error clustered by document with the run-to-run variance carried
(Miller 2024, "Adding Error Bars to Evals", sections 2-3; Madaan et al. 2024 on seed variance).

Scores y[a, r, i] (arm a, run r, document i) are read as y = mu_a + u_ai + c_ar + e_ari: a document's own
level u, a run's shift c shared by every document of the run (a seed that makes the whole run better),
and the rest e. The estimate is delta = mean_i (tbar_i - bbar_i), tbar_i the document's mean over the
tuned arm's runs. Its variance has two parts:
- documents: var_i(tbar_i - bbar_i) / n, which holds u and e (e already divided by the runs);
- runs: sigma_c^2 (1/R_b + 1/R_t), the run shifts the document differences cannot see (they are shared
  by every document), one shift law for both arms (one harness). Estimated from the run means m_ar:
  their variance is sigma_c^2 + sigma_e^2/n, and the within-document variance over runs is
  sigma_c^2 + sigma_e^2, so sigma_c^2 = (MSB - MSW) / (n - 1), MSB = n * var_r(m_ar) and MSW = w_a pooled
  over the arms, counted only where an F test says the runs do shift (sampled runs rarely do: their
  noise is per document, and the first part carries it).
So SE^2 = s_d^2 / n + sigma_c^2 (1/R_b + 1/R_t), and every added document and every added run shrinks it.
The interval is delta +- t(0.975, df) * SE, df by Welch-Satterthwaite over the parts (n - 1 for the
documents, (R_b - 1) + (R_t - 1) for the shift: where the runs shift, the runs are the few units that
measure it); its p-value is the two-sided t test of delta = 0 (`gate.stats.estimate` puts it together).

The F test runs at RUN_SHIFT_ALPHA = 0.05 over both arms at once. A shift the test misses leaves the
interval too narrow; a false one widens it, most at 2 runs per arm, where the shift has 2 df. Two choices
were measured and left: a lenient pre-test (0.25, as Bancroft 1944 has for pooling), and a test per arm
(1 df each at 2 runs): both made 2 runs per arm less powerful than one (tests/gate/power_grid.py).
Measured in tests/gate/test_clustered.py (600 seeded trials a cell, 60 documents, per-document noise
SD 4): with no shifts the interval covers at 94-96 %; with shifts of SD 2-4 the F test mostly sees, 89 %
at 2 runs per arm, 92 % at 3, 95 % at 5; a shift it half sees (SD 0.5-1: its variance 1-4x that of a
run mean's noise) leaves it shortest: 84-88 % at 2 runs, 87-90 % at 3, 91-92 % at 5. Where a shift is
counted the verdict says so, and that more runs (not documents) narrow it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tuneproof.core.quantiles import t_quantile

ALPHA = 0.05
POWER = 0.80
RUN_SHIFT_ALPHA = 0.05


def run_variance(*arms_RD: np.ndarray) -> float:
    """sigma_c^2, the variance of a run's shift shared by every document, pooled over the arms (one
    harness, one shift law), where the data show one: the run means scatter more than the documents' own
    run-to-run variance explains (the pooled ratio MSB / MSW, MSB = n * var_r(m_ar), MSW = w_a, each
    weighted by its arm's R_a - 1, against F(sum (R_a - 1), n * sum (R_a - 1)) at RUN_SHIFT_ALPHA); 0
    otherwise, and where an arm has one run. A shift the test cannot see is left to the document part,
    which already carries each document's run-to-run variance divided by the runs (Miller 2024's
    E[sigma_i^2] / (nK) term). Pooling the arms gives one test, not two, and the estimate twice the df."""
    from scipy import stats as sps

    n = arms_RD[0].shape[1]
    if n < 2 or any(a.shape[0] < 2 for a in arms_RD):
        return 0.0
    weights = [a.shape[0] - 1 for a in arms_RD]
    msb = sum(w * n * float(np.var(a.mean(axis=1), ddof=1)) for w, a in zip(weights, arms_RD, strict=True))
    msw = sum(w * float(np.var(a, axis=0, ddof=1).mean()) for w, a in zip(weights, arms_RD, strict=True))
    msb, msw = msb / sum(weights), msw / sum(weights)
    if msw > 0 and msb / msw <= float(sps.f.ppf(1 - RUN_SHIFT_ALPHA, sum(weights), n * sum(weights))):
        return 0.0
    return max((msb - msw) / (n - 1), 0.0)


def shift_df(runs: tuple[int, ...]) -> int:
    """The df of the pooled run-shift estimate: the runs beyond the first in every arm."""
    return sum(r - 1 for r in runs)


def p_value(delta: float, se: float, df: float) -> float:
    """Two-sided t test of delta = 0; with no spread at all, 0 for any change and 1 for none."""
    from scipy import stats as sps

    if se <= 0:
        return 0.0 if delta != 0 else 1.0
    return float(2 * sps.t.sf(abs(delta) / se, df))


def equivalence_p(delta: float, se: float, df: float, band: float) -> float:
    """The p-value of "the change lies inside +-band" (two one-sided t tests, the larger p); with no
    spread at all, 0 inside the band and 1 outside."""
    from scipy import stats as sps

    if se <= 0:
        return 0.0 if abs(delta) < band else 1.0
    return float(max(sps.t.sf((delta + band) / se, df), sps.t.sf((band - delta) / se, df)))


def satterthwaite(parts: list[tuple[float, int]]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variance parts (value, its df), at least 1."""
    total = sum(v for v, _ in parts)
    spread = sum(v * v / df for v, df in parts if v > 0 and df > 0)
    return max(1.0, total * total / spread) if spread > 0 else float(max(1, max(df for _, df in parts)))


def mde(se: float, df: float, bar: float | None = None) -> float:
    """The smallest true change the rule as applied calls with probability POWER: the two-sided test at
    ALPHA, and the estimate beyond `bar` where one must be beaten."""
    from scipy import stats as sps

    return max(bar or 0.0, t_quantile(df, 1 - ALPHA) * se) + float(sps.t.ppf(POWER, max(df, 1.0))) * se


def power(effect: float, se: float, df: float, bar: float | None = None, alpha: float = ALPHA) -> float:
    """Probability that the rule calls a true change of `effect`: the estimate beyond t * se (the test at
    `alpha`) and beyond `bar` where one must be beaten (the far tail neglected). A change the size of the
    bar is called half the time at best."""
    from scipy import stats as sps

    threshold = max(bar or 0.0, t_quantile(df, 1 - alpha) * se)
    if se <= 0:
        return 1.0 if abs(effect) > threshold else alpha if effect == 0 else 0.0
    return float(sps.t.sf((threshold - abs(effect)) / se, df))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error at ALPHA over the list), in input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True, slots=True)
class Parts:
    """The variance parts of the model above, read from two arms (runs x documents): B the documents'
    own differences, noise_a (sigma_e^2) a document's run-to-run variance in arm a, shift (sigma_c^2, pooled)
    the run shift. `se_df` gives delta's standard error and df at any documents and runs per arm."""

    between: float
    noise: tuple[float, float]
    shift: float

    @classmethod
    def read(cls, base_RD: np.ndarray, tuned_RD: np.ndarray) -> Parts:
        shift = run_variance(base_RD, tuned_RD)
        within = [
            float(np.var(a, axis=0, ddof=1).mean()) if a.shape[0] > 1 else 0.0 for a in (base_RD, tuned_RD)
        ]
        noise = (max(within[0] - shift, 0.0), max(within[1] - shift, 0.0))
        d = tuned_RD.mean(axis=0) - base_RD.mean(axis=0)
        sd2 = float(np.var(d, ddof=1))
        between = max(sd2 - noise[0] / base_RD.shape[0] - noise[1] / tuned_RD.shape[0], 0.0)
        return cls(between, noise, shift)

    def se_df(self, docs: int, runs: tuple[int, int]) -> tuple[float, float]:
        doc_part = (self.between + self.noise[0] / runs[0] + self.noise[1] / runs[1]) / docs
        parts = [(doc_part, docs - 1), (self.shift * (1 / runs[0] + 1 / runs[1]), shift_df(runs))]
        return float(np.sqrt(sum(v for v, _ in parts))), satterthwaite(parts)

    def power_at(
        self, effect: float, docs: int, runs: tuple[int, int], bar: float | None = None, alpha: float = ALPHA
    ) -> float:
        se, df = self.se_df(docs, runs)
        return power(effect, se, df, bar, alpha)
