"""The FLOP report: both ledgers, the named excess lines between them, and MFU."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tuneproof.arch.shape import ModelShape
from tuneproof.attention.paths import Mask
from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.flops.effects import EFFECTS, EffectContext, intended_state
from tuneproof.flops.ledger import Ledger, walk
from tuneproof.hardware.gpus import Peak
from tuneproof.runs.step import UNKNOWN_PATH, Step

UNKNOWN_NOTE = (
    "the attention implementation is not one tuneproof models: the performed ledger counts the pairs the "
    "architecture intends on attention (a lower bound), so no performed MFU is given"
)


@dataclass(frozen=True, slots=True)
class Excess:
    """One named difference between the ledgers: performed - intended = sum of these."""

    name: str
    flops: float
    why: str


@dataclass(kw_only=True, frozen=True, slots=True)
class Mfu:
    """MFU against a dense peak of `dtype`. `intended`/`performed` are None when no peak is known,
    and `reason` says why."""

    intended: float | None
    performed: float | None
    peak_tflops: float | None
    peak_source: str | None
    dtype: str
    reason: str | None
    step_time_s: float | None

    @classmethod
    def compute(cls, intended: float, performed: float, step_time_s: float | None, peak: Peak | None) -> Mfu:
        dtype = peak.dtype if peak else "bf16"
        tflops, source = (peak.tflops, peak.source) if peak else (None, None)
        if step_time_s is None:
            return cls(
                intended=None,
                performed=None,
                peak_tflops=tflops,
                peak_source=source,
                dtype=dtype,
                reason="no step time given",
                step_time_s=None,
            )
        if peak is None or peak.tflops is None:
            reason = peak.reason if peak else "no peak: give a GPU name or a peak in TFLOP/s"
            return cls(
                intended=None,
                performed=None,
                peak_tflops=None,
                peak_source=None,
                dtype=dtype,
                reason=reason,
                step_time_s=step_time_s,
            )
        denom = step_time_s * peak.tflops * 1e12
        return cls(
            intended=intended / denom,
            performed=performed / denom,
            peak_tflops=peak.tflops,
            peak_source=peak.source,
            dtype=dtype,
            reason=peak.reason,
            step_time_s=step_time_s,
        )


@dataclass(kw_only=True, slots=True)
class FlopReport:
    shape: ModelShape
    run: Step
    intended: Ledger
    performed: Ledger
    excess: list[Excess]
    mfu: Mfu
    attention: dict[str, Mask]  # attention group label -> the mask decision of the run's path
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> None:
        return None  # a ledger judges nothing: its notes say what to look at

    def render(self, console: Any) -> None:
        from tuneproof.flops.render import render_report

        render_report(self, console)

    def to_dict(self) -> dict[str, Any]:
        def side(ledger: Ledger) -> dict[str, Any]:
            return {
                "total": ledger.total,
                "by_component": ledger.by("component"),
                "by_pass": ledger.by("pass_"),
                "by_layer": ledger.by_layer(),
            }

        m = self.mfu
        achieved = (
            {
                "intended_tflops": self.intended.total / m.step_time_s / 1e12,
                "performed_tflops": self.performed.total / m.step_time_s / 1e12,
            }
            if m.step_time_s
            else {}
        )
        return {
            "model_type": self.shape.model_type,
            "run": {
                "seq_len": self.run.seq_len,
                "batch": self.run.batch,
                "attn": self.run.attn,
                "padding_fraction": self.run.padding_fraction,
                "mode": self.run.mode,
                "lora_rank": self.run.lora_rank if self.run.mode == "lora" else None,
                "grad_ckpt": self.run.grad_ckpt,
                "real_tokens": self.run.real_tokens,
                "padded_tokens": self.run.padded_tokens,
                "lengths": list(self.run.lengths) if self.run.lengths is not None else None,
            },
            "convention": "matmul FLOPs, 2*m*n*k; see tuneproof.flops.ledger",
            "intended": side(self.intended),
            "performed": side(self.performed),
            "excess": [{"name": e.name, "flops": e.flops, "why": e.why} for e in self.excess],
            "attention": {
                label: {"mask_materialised": m.materialised, "reason": m.reason}
                for label, m in self.attention.items()
            },
            "mfu": {
                "intended": m.intended,
                "performed": m.performed,
                "peak_tflops": m.peak_tflops,
                "peak_source": m.peak_source,
                "reason": m.reason,
                "dtype": m.dtype,
                "step_time_s": m.step_time_s,
                **achieved,
            },
            "notes": self.notes,
        }


MIN_STEP_TIME_S, MAX_STEP_TIME_S = 1e-6, 1e7  # a microsecond to four months: anything else is a typo


def check_step_time(step_time_s: object) -> float:
    return validate.real(
        "step_time",
        step_time_s,
        low=MIN_STEP_TIME_S,
        high=MAX_STEP_TIME_S,
        hint="pass measured seconds per step",
    )


def step_totals(shape: ModelShape, run: Step) -> tuple[float, float]:
    """(intended, performed) totals of `flop_report`, without the excess lines: one walk for each
    ledger instead of one per effect (for callers that price many micro-batches, e.g. the callback)."""
    ctx = EffectContext.of(shape, run)
    state = intended_state(ctx)
    intended = walk(shape, run, state, ctx.lora).total
    for effect in EFFECTS:
        state = effect.apply(state, ctx)
    return float(intended), float(walk(shape, run, state, ctx.lora).total)


def flop_report(
    shape: ModelShape, run: Step, step_time_s: float | None = None, peak: Peak | None = None
) -> FlopReport:
    """Both ledgers for `run` on `shape`, the excess lines that explain their difference, and MFU.

    `step_time_s` needs `peak` (a `Peak` whose `tflops` may be None, with the reason: MFU is then
    reported unknown); without a step time there is no MFU."""
    if step_time_s is not None:
        check_step_time(step_time_s)
        if peak is None:
            raise TuneproofError(
                "{step_time} needs a peak for MFU",
                "add {gpu} or {peak_tflops}",
                fields=("step_time", "gpu", "peak_tflops"),
            )
    ctx = EffectContext.of(shape, run)
    state = intended_state(ctx)
    intended = ledger = walk(shape, run, state, ctx.lora)
    excess: list[Excess] = []
    for effect in EFFECTS:  # one fold: each effect's added FLOPs are its line
        state = effect.apply(state, ctx)
        after = walk(shape, run, state, ctx.lora)
        if effect.per_attention_group:
            for label, idxs in ctx.groups.items():
                members = set(idxs)
                diff = after.where(layers=members) - ledger.where(layers=members)
                if diff:
                    kind = shape.layers[idxs[0]].attention.kind
                    name = effect.name.format(kind=kind, count=len(idxs), label=label, attn=run.attn)
                    excess.append(Excess(name, diff, effect.why(ctx, tuple(idxs))))
        elif diff := after.total - ledger.total:
            excess.append(Excess(effect.name, diff, effect.why(ctx, ())))
        ledger = after
    notes = []
    if run.attn in shape.attn_refused:
        notes.append(
            f"transformers will not run {run.attn} for {shape.model_type} ({shape.attn_refused[run.attn]}): "
            "this ledger shows what it would compute; use eager or flex_attention"
        )
    mfu = Mfu.compute(intended.total, ledger.total, step_time_s, peak)
    if run.attn == UNKNOWN_PATH:
        notes.append(UNKNOWN_NOTE)
        if mfu.performed is not None:
            mfu = replace(mfu, performed=None, reason=UNKNOWN_NOTE)
    if mfu.performed is not None and mfu.performed > 1.0:
        notes.append(
            f"performed MFU {100 * mfu.performed:.3g} % is over 100 %: the step time is too short or the "
            "peak too low for this work (is it the time of one micro-batch step, on this GPU?)"
        )
    attention = {label: ctx.performed[idxs[0]].mask for label, idxs in ctx.groups.items()}
    return FlopReport(
        shape=shape,
        run=run,
        intended=intended,
        performed=ledger,
        excess=excess,
        mfu=mfu,
        attention=attention,
        notes=notes,
    )
