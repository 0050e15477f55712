"""Student's t, the one quantile every interval and test here takes: the fit's coefficients, the probe's
medians, the gate's clustered differences, the adjudicator's paired errors."""

from __future__ import annotations

CONFIDENCE = 0.95


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided `confidence` quantile of Student's t with `df` degrees of freedom (df under 1 is
    taken as 1: the widest a test with any data can have)."""
    from scipy.stats import t  # scipy.stats costs a second to import: only where an interval is made

    return float(t.ppf(0.5 + confidence / 2, max(df, 1.0)))
