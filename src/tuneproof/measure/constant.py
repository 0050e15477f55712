"""The constant-term test of the step-time fit: does t = C + A*w + B*w^2 need its C?

C's 95 % interval is judged against a margin (10 % of the smallest width's step, `fit.CONSTANT_MARGIN`):
present (above it: per-step overhead, launch- or host-bound), absent (inside +-margin: too small to
matter), or undetermined (too wide to say, with about how many repeats would decide).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuneproof.measure import robust
from tuneproof.verdict import OK, Verdict

MAX_REPEATS_ADVICE = 1000


@dataclass(frozen=True, slots=True)
class ConstantTerm:
    """The fit t = C + A*w + B*w^2 judged against `margin` seconds: present, absent or undetermined."""

    verdict: str  # "present" | "absent" | "undetermined"
    c: float
    interval: tuple[float, float] | None
    margin: float
    repeats_to_decide: int | None
    reason: str

    @property
    def significant(self) -> bool | None:
        """True when present, False when absent, None when undetermined."""
        return {"present": True, "absent": False}.get(self.verdict)

    def as_verdict(self) -> Verdict:
        """The constant test as the one verdict type (exit 0: the fit reports it, nothing fails):
        `margin` is |C| beyond the margin line (negative inside it), `noise` the interval's half-width."""
        half = (self.interval[1] - self.interval[0]) / 2 if self.interval else None
        return Verdict(self.verdict, self.reason, OK, abs(self.c) - self.margin, half)

    def to_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "C": self.c,
            "interval": list(self.interval) if self.interval else None,
            "margin": self.margin,
            "repeats_to_decide": self.repeats_to_decide,
            "reason": self.reason,
        }


def judge_constant(
    c: float, interval: tuple[float, float] | None, margin: float, repeats: int
) -> ConstantTerm:
    """Present if the whole interval lies above +margin; absent if it lies inside [-margin, +margin];
    otherwise undetermined, with about how many repeats per width would decide it if the noise stays."""
    if interval is None:
        return ConstantTerm(
            "undetermined",
            c,
            None,
            margin,
            None,
            f"C = {c:.3g} s (unconstrained fit) has no interval (it needs {robust.MIN_FOR_INTERVAL} "
            "kept repeats per width, "
            f"the fewest here is {repeats}): add repeats to test it",
        )
    lo, hi = interval
    where = (
        f"C = {c:.3g} s (unconstrained fit), 95 % interval [{lo:.3g}, {hi:.3g}] s vs a margin of "
        f"{margin:.3g} s (10 % of the smallest step)"
    )
    if lo > margin:
        return ConstantTerm(
            "present",
            c,
            interval,
            margin,
            None,
            f"{where}: per-step overhead that does not scale with width is present (launch- or host-bound)",
        )
    if -margin <= lo and hi <= margin:
        return ConstantTerm(
            "absent",
            c,
            interval,
            margin,
            None,
            f"{where}: any constant is too small to matter, so the launch-/host-bound hypothesis is refuted",
        )
    if hi < -margin:
        return ConstantTerm(
            "undetermined",
            c,
            interval,
            margin,
            None,
            f"{where}: C is negative beyond the noise, so t = C + A*w + B*w^2 does not describe "
            "these timings",
        )
    half = (hi - lo) / 2
    needed = []
    if abs(c) < margin:  # to call it absent, the half-width must shrink to margin - |C|
        needed.append(repeats * (half / (margin - abs(c))) ** 2)
    if c > margin:  # to call it present, it must shrink to C - margin
        needed.append(repeats * (half / (c - margin)) ** 2)
    n = math.ceil(min(needed)) if needed else None
    if n is not None and n > MAX_REPEATS_ADVICE:
        advice = f"more than {MAX_REPEATS_ADVICE} repeats per width would be needed: quieten the machine"
        n = None
    elif n is not None:
        advice = f"about {n} repeats per width would decide it if the noise stays as it is"
    elif c < 0:
        advice = "C is below -margin: more repeats could only show that the model does not fit"
    else:
        advice = "C sits on the margin: repeats alone will not decide it"
    return ConstantTerm(
        "undetermined", c, interval, margin, n, f"{where}: the interval is too wide to say; {advice}"
    )
