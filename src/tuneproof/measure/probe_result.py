"""What a probe concludes from its measurements (`analyse`: the fit, the cross-check, the FLOP ledger
with MFU), as a `ProbeResult` that owns its JSON and its text."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tuneproof.core.verdict import NoWarnings, Verdict
from tuneproof.measure import robust
from tuneproof.measure.crosscheck import CrossCheck, cross_check
from tuneproof.measure.fit import ScalingFit, fit_scaling
from tuneproof.measure.kernels import PROFILE_COLUMNS, KernelTable
from tuneproof.measure.timing import Interleaved, Timing

if TYPE_CHECKING:
    from tuneproof.arch import ResolvedModel
    from tuneproof.measure.probe import ProbeSetup


@dataclass(kw_only=True, frozen=True, slots=True)
class Derived:
    """A number the probe derives from its measurements, with its 95 % interval, or None and the reason.
    `unit`: "share" (0-1, shown as %) or "points" (percentage points)."""

    name: str
    value: float | None
    interval: tuple[float, float] | None
    no_interval_reason: str | None
    unit: str = "share"
    scope: str | None = None  # what the interval leaves out, said beside it

    def text(self) -> str:
        scale, sign = (100, "") if self.unit == "share" else (1, "+")
        if self.value is None:
            return f"{self.name}: unknown ({self.no_interval_reason})"
        unit = " %" if self.unit == "share" else " points"
        ci = self.interval
        where = (f"95 % interval {scale * ci[0]:{sign}.1f} to {scale * ci[1]:{sign}.1f}{unit}" if ci
                 else f"no interval: {self.no_interval_reason}")  # fmt: skip
        scope = f"; {self.scope}" if self.scope and ci else ""
        return f"{self.name} = {scale * self.value:{sign}.1f}{unit} ({where}{scope})"

    def to_dict(self) -> dict[str, Any]:
        return {
            self.name: self.value,
            f"{self.name}_interval": list(self.interval) if self.interval else None,
            f"{self.name}_no_interval_reason": self.no_interval_reason,
            # shares are fractions 0-1, gaps percentage points: the key alone does not say which
            f"{self.name}_unit": "fraction" if self.unit == "share" else "points",
            **({f"{self.name}_interval_scope": self.scope} if self.scope else {}),
        }


def step_interval_reason(t: Timing) -> str | None:
    """Why a step time's median has no 95 % interval (None when it has one)."""
    if t.median_interval is not None:
        return None
    if t.repeats == 1:
        return "one repeat: no interval"
    return f"{t.repeats} kept repeats: a median's 95 % interval needs {robust.MIN_FOR_INTERVAL}"


def mfu_numbers(report: Any, t: Timing) -> list[Derived]:
    """MFU intended and performed: flops / (step time * peak), so the interval is the step-time median's
    interval mapped through 1/t (the FLOP count is exact). A measured peak has its own run-to-run
    spread, which the interval does not hold: the line says so."""
    m = report.mfu
    out = []
    measured = (m.peak_source or "").startswith("measured peak")
    scope = "step time only: the measured peak's own run-to-run spread is not in it" if measured else None
    for basis in ("intended", "performed"):
        name, value = f"mfu_{m.dtype}_{basis}", getattr(m, basis)
        if value is None:
            out.append(
                Derived(name=name, value=None, interval=None, no_interval_reason=f"no MFU: {m.reason}")
            )
            continue
        ci, why = t.median_interval, step_interval_reason(t)
        interval = (value * m.step_time_s / ci[1], value * m.step_time_s / ci[0]) if ci else None
        out.append(
            Derived(name=name, value=float(value), interval=interval, no_interval_reason=why, scope=scope)
        )
    return out


def derived_numbers(result: ProbeResult) -> list[Derived]:
    """Every number the probe derives, each with its interval or the reason it has none: MFU, the
    quadratic share per width (the fit's), the cross-check's gap and the reference run's comparison."""
    fit, cross = result.fit, result.cross
    out = mfu_numbers(result.flops, result.timings[result.profiled_width])
    for w, share in fit.quad_share.items():
        ci, how = fit.share_ci(w)  # (interval, its method) or (None, why there is none)
        if w in fit.unstable:
            ci, how = None, "unstable: the fit's share lies outside its own interval at these widths"
        out.append(
            Derived(
                name=f"quad_share_{w:g}", value=share, interval=ci, no_interval_reason=None if ci else how
            )
        )
    v = cross.verdict
    why = None if v.interval else "; ".join(n for n in cross.notes if "interval" in n) or "no interval"
    out.append(
        Derived(
            name="cross_check_gap", value=v.gap, interval=v.interval, no_interval_reason=why, unit="points"
        )
    )
    if not cross.attributable:  # the section prints no comparison: neither does the summary
        why = "; ".join(n for n in cross.notes if "attribution" in n) or "no attribution by kernel class"
        out.append(
            Derived(
                name="comparison_gap",
                value=None,
                interval=None,
                no_interval_reason=f"no comparison: {why}",
                unit="points",
            )
        )
    elif cross.comparison is not None:
        c = cross.comparison
        ci = c.intervals["comparison_gap"] if c.intervals else None
        out.append(
            Derived(
                name="comparison_gap",
                value=c.points["comparison_gap"],
                interval=ci,
                no_interval_reason=c.no_interval_reason,
                unit="points",
            )
        )
    return out


@dataclass(kw_only=True, slots=True)
class ProbeResult(NoWarnings):
    model: str
    spec: ProbeSetup
    timing: Interleaved[int]
    fit: ScalingFit
    kernel_ms: dict[int, list[dict[str, float]]]  # width -> per profile, ms per kernel class
    kernels: KernelTable  # the largest width's first profile, for its top kernels
    cross: CrossCheck
    flops: Any  # FlopReport at the profiled width
    peak: Any  # hardware.Peak used for MFU
    files: dict[str, str] = field(default_factory=dict)

    @property
    def timings(self) -> dict[int, Timing]:
        return self.timing.timings

    @property
    def skipped(self) -> dict[int, str]:
        return self.timing.skipped

    @property
    def profiled_width(self) -> int:
        return self.cross.width

    @property
    def derived(self) -> list[Derived]:
        return derived_numbers(self)

    @property
    def verdict(self) -> Verdict:
        """The cross-check's agreement (agree, disagree or inconclusive), exit code 0."""
        return self.cross.verdict.as_verdict()

    def render(self, console: Any) -> None:
        from tuneproof.measure.render import render_probe

        render_probe(self, console)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "spec": self.spec.to_dict(),
            "timing": self.timing.to_dict(),
            "points": [{"width": w, **t.to_dict()} for w, t in sorted(self.timings.items())],
            "skipped": [{"width": w, "reason": r} for w, r in sorted(self.skipped.items())],
            "fit": self.fit.to_dict(),
            "kernel_ms": {str(w): rows for w, rows in sorted(self.kernel_ms.items())},
            "kernels": self.kernels.to_dict(),
            "cross_check": self.cross.to_dict(),
            "flops": self.flops.to_dict(),
            "derived": {k: x for d in self.derived for k, x in d.to_dict().items()},
            "files": self.files,
        }


def analyse(
    model: ResolvedModel,
    spec: ProbeSetup,
    timing: Interleaved[int],
    kernel_ms: dict[int, list[dict[str, float]]],
    set_aside: dict[int, list[float]],
    first_table: KernelTable,
    peak: Any,
) -> ProbeResult:
    """The fit, the cross-check at the largest width, their notes, and the FLOP ledger with MFU for the
    measured step: everything the probe concludes from its measurements."""
    from tuneproof.flops import flop_report

    widths = sorted(timing.timings)
    ws, ts = timing_rows(timing)
    fit = fit_scaling(ws, ts, seed=spec.seed)
    profiled = max(widths)
    cross = cross_check(
        widths,
        [timing.timings[w].kept for w in widths],
        [np.array([[p[c] for c in PROFILE_COLUMNS] for p in kernel_ms[w]]) for w in widths],
        at=profiled,
        constant=fit.constant_in_model,
        seed=spec.seed,
    )
    for w, totals in set_aside.items():
        if totals:
            cross.notes.append(
                f"width {w}: {len(totals)} outlying profile(s) set aside and re-profiled (total "
                + ", ".join(f"{t:.1f}" for t in totals)
                + " ms)"
            )
    if fit.constant.verdict == "undetermined":
        cross.notes.append(
            "the constant test is undetermined, so both sides are fitted with a constant term: "
            "wider intervals, no assumption that per-step overhead is absent"
        )
    run = spec.step(profiled)
    report = flop_report(model.shape, run, step_time_s=timing.timings[profiled].median_s, peak=peak)
    return ProbeResult(
        model=model.name,
        spec=spec,
        timing=timing,
        fit=fit,
        kernel_ms=kernel_ms,
        kernels=first_table,
        cross=cross,
        flops=report,
        peak=peak,
    )


def timing_rows(timing: Interleaved[int]) -> tuple[np.ndarray, np.ndarray]:
    """(width, seconds) of every timed repeat, outliers included (the fit sets them aside itself)."""
    widths = sorted(timing.timings)
    ws = np.concatenate([[w] * len(timing.timings[w].times_s) for w in widths]).astype(float)
    return ws, np.concatenate([timing.timings[w].times_s for w in widths])
