"""The constant-term test of the step-time fit: does t = C + A*w + B*w^2 need its C?

Equivalence logic on C's 95 % interval against a negligible band of +-margin (10 % of the smallest
width's step, `fit.CONSTANT_MARGIN`: a constant that small cannot make a run launch-bound):
present (the whole interval above +margin: per-step overhead, launch- or host-bound), absent (the
whole interval inside the band: too small to matter), or undetermined (too wide to say, with about
how many repeats per width would decide it). The interval comes from the bootstrap with 6 or more
kept repeats per width and from the pooled residuals (`measure.pooled`) with fewer, so any number of
repeats gets an answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tuneproof.core.verdict import OK, Verdict
from tuneproof.measure import robust

MAX_REPEATS_ADVICE = 1000
POWER_FACTOR = 1 + 0.8416212335729143 / 1.959963984540054  # 1 + z_0.8 / z_0.975


@dataclass(kw_only=True, frozen=True, slots=True)
class ConstantTerm:
    """The fit t = C + A*w + B*w^2 judged against `margin` seconds: present, absent or undetermined."""

    verdict: str  # "present" | "absent" | "undetermined"
    c: float
    interval: tuple[float, float] | None
    margin: float
    repeats_to_decide: int | None
    reason: str
    beyond_advice: bool = False  # more repeats than MAX_REPEATS_ADVICE would be needed (the count is None)

    @property
    def significant(self) -> bool | None:
        """True when present, False when absent, None when undetermined."""
        return {"present": True, "absent": False}.get(self.verdict)

    def as_verdict(self) -> Verdict:
        """The constant test as the one verdict type (exit 0: the fit reports it, nothing fails):
        `margin` is |C| beyond the margin line (negative inside it), `noise` the interval's half-width."""
        half = (self.interval[1] - self.interval[0]) / 2 if self.interval else None
        return Verdict(
            outcome=self.verdict,
            reason=self.reason,
            exit_code=OK,
            margin=abs(self.c) - self.margin,
            noise=half,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "C": self.c,
            "interval": list(self.interval) if self.interval else None,
            "margin": self.margin,
            "repeats_to_decide": self.repeats_to_decide,
            # with repeats_to_decide null: the text's "more than N repeats per width" as a number
            "repeats_to_decide_more_than": MAX_REPEATS_ADVICE if self.beyond_advice else None,
            "reason": self.reason,
        }


def square_law(repeats: int, half: float) -> Callable[[float], int | None]:
    """Repeats per width, more than taken, at which the test decides 80 % of the time when the estimate
    sits `target` from the band's edge: the half-width (measured at `repeats`) shrinks by the 1/sqrt(n)
    law of a resampling interval, and must fall to target / (1 + z_0.8 / z_0.975) (the half-width alone
    would decide half the time); None past MAX_REPEATS_ADVICE."""

    def needed(target: float) -> int | None:
        if target <= 0:
            return None
        n = max(math.ceil(repeats * (half * POWER_FACTOR / target) ** 2), repeats + 1)
        return n if n <= MAX_REPEATS_ADVICE else None

    return needed


def judge_constant(
    c: float,
    interval: tuple[float, float] | None,
    margin: float,
    repeats: int,
    to_decide: Callable[[float], int | None] | None = None,
    basis: str = "",
) -> ConstantTerm:
    """Equivalence logic on C's 95 % interval against the negligible band [-margin, +margin]:
    present if the whole interval lies above +margin; absent if it lies inside the band; otherwise
    undetermined, naming about how many repeats per width would decide it if the noise stays.
    `to_decide(target)` gives the repeats that shrink the interval's half-width below `target`
    (default: `square_law`); `basis` names how the interval was made."""
    if interval is None:
        return ConstantTerm(
            verdict="undetermined",
            c=c,
            interval=None,
            margin=margin,
            repeats_to_decide=None,
            reason=f"C = {c:.3g} s (unconstrained fit) has no interval (it needs {robust.MIN_FOR_INTERVAL} "
            "kept repeats per width, "
            f"the fewest here is {repeats}): add repeats to test it",
        )
    lo, hi = interval
    where = (
        f"C = {c:.3g} s (unconstrained fit), 95 % interval [{lo:.3g}, {hi:.3g}] s"
        + (f" ({basis})" if basis else "")
        + f" vs a margin of {margin:.3g} s (10 % of the smallest step)"
    )
    if lo > margin:
        return ConstantTerm(
            verdict="present", c=c, interval=interval, margin=margin, repeats_to_decide=None,
            reason=f"{where}: per-step overhead that does not scale with width is present "
            "(launch- or host-bound)",
        )  # fmt: skip
    if -margin <= lo and hi <= margin:
        return ConstantTerm(
            verdict="absent", c=c, interval=interval, margin=margin, repeats_to_decide=None,
            reason=f"{where}: any constant is too small to matter, so the launch-/host-bound hypothesis "
            "is refuted",
        )  # fmt: skip
    if hi < -margin:
        return ConstantTerm(
            verdict="undetermined",
            c=c,
            interval=interval,
            margin=margin,
            repeats_to_decide=None,
            reason=f"{where}: C is negative beyond the noise, so t = C + A*w + B*w^2 does not describe "
            "these timings",
        )
    decide = to_decide or square_law(repeats, (hi - lo) / 2)
    if hi < 0:  # below 0 beyond the noise, as the share's interval reads it, but not beyond the band
        return _below_zero(c, interval, margin, decide, where)
    targets = [margin - abs(c)] if abs(c) < margin else []  # absent: the half-width must shrink to this
    targets += [c - margin] if c > margin else []  # present: to this
    counts = [k for k in map(decide, targets) if k is not None]
    n = min(counts) if counts else None
    if targets and n is None:
        advice = f"more than {MAX_REPEATS_ADVICE} repeats per width would be needed: quieten the machine"
    elif n is not None:
        advice = f"about {n} repeats per width would decide it if the estimate and the noise stay as they are"
    elif c < 0:
        advice = (
            "C's estimate is below -margin: if it stays there, more repeats would show that the model "
            "does not fit"
        )
    else:
        advice = "C sits on the margin: repeats alone will not decide it"
    return ConstantTerm(
        verdict="undetermined", c=c, interval=interval, margin=margin, repeats_to_decide=n,
        reason=f"{where}: the interval is too wide to say; {advice}",
        beyond_advice=bool(targets) and n is None,
    )  # fmt: skip


def _below_zero(
    c: float, interval: tuple[float, float], margin: float, decide: Callable[[float], int | None], where: str
) -> ConstantTerm:
    """C's whole interval below 0 but not below -margin: no overhead is negative, so say what it can be."""
    n = decide(margin - abs(c)) if abs(c) < margin else None
    more = f"about {n} repeats per width would tell which" if n else "more repeats would tell which"
    return ConstantTerm(
        verdict="undetermined", c=c, interval=interval, margin=margin, repeats_to_decide=n,
        reason=f"{where}: C is below 0 beyond the noise (no per-step overhead is negative): either a "
        f"1-in-40 draw of a negligible constant or timings that t = C + A*w + B*w^2 does not describe; an "
        f"overhead above the margin is not supported; {more}",
    )  # fmt: skip
