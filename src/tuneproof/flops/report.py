"""The FLOP report: both ledgers, the named excess lines between them, and MFU."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuneproof.arch.shape import ModelShape
from tuneproof.flops.attention import intended_pairs, performed_pairs
from tuneproof.flops.ledger import Ledger, walk
from tuneproof.flops.run import RunSpec
from tuneproof.hardware import Peak

FUSED_PATHS = ("sdpa", "flash_attention_2", "flex_attention")


@dataclass(frozen=True, slots=True)
class Excess:
    """One named difference between the ledgers: performed - intended = sum of these."""

    name: str
    flops: float
    why: str


@dataclass(frozen=True, slots=True)
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
        if step_time_s is None:
            return cls(
                None,
                None,
                peak.tflops if peak else None,
                peak.source if peak else None,
                dtype,
                "no --step-time given",
                None,
            )
        if peak is None or peak.tflops is None:
            reason = peak.reason if peak else "no peak: pass --gpu NAME or --peak-tflops"
            return cls(None, None, None, None, dtype, reason, step_time_s)
        denom = step_time_s * peak.tflops * 1e12
        return cls(intended / denom, performed / denom, peak.tflops, peak.source, dtype, None, step_time_s)


@dataclass(slots=True)
class FlopReport:
    shape: ModelShape
    run: RunSpec
    intended: Ledger
    performed: Ledger
    excess: list[Excess]
    mfu: Mfu
    notes: list[str] = field(default_factory=list)

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
            },
            "convention": "matmul FLOPs, 2*m*n*k; see tuneproof.flops.ledger",
            "intended": side(self.intended),
            "performed": side(self.performed),
            "excess": [{"name": e.name, "flops": e.flops, "why": e.why} for e in self.excess],
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


def flop_report(
    shape: ModelShape, run: RunSpec, step_time_s: float | None = None, peak: Peak | None = None
) -> FlopReport:
    """Both ledgers for `run` on `shape`, the excess lines that explain their difference, and MFU."""
    lengths = run.real_lengths()
    width = run.seq_len
    want_pairs = [sum(intended_pairs(n, layer.attention.window) for n in lengths) for layer in shape.layers]
    path = {
        layer.index: performed_pairs(run.attn, width, lengths, layer.attention.window)
        for layer in shape.layers
    }
    got_pairs = [path[layer.index].pairs for layer in shape.layers]
    fused = run.attn in FUSED_PATHS

    # Each walk switches on one more performed-only effect; consecutive differences are the excess lines.
    real, slots = run.real_tokens, run.padded_tokens
    intended = walk(shape, run, real, want_pairs, recompute=False, fused=False, input_grads=False)
    with_recompute = walk(shape, run, real, want_pairs, recompute=True, fused=False, input_grads=False)
    with_input_grads = walk(shape, run, real, want_pairs, recompute=True, fused=False, input_grads=True)
    padded_linears = walk(shape, run, slots, want_pairs, recompute=True, fused=False, input_grads=True)
    attn_performed = walk(shape, run, slots, got_pairs, recompute=True, fused=False, input_grads=True)
    performed = walk(shape, run, slots, got_pairs, recompute=True, fused=fused, input_grads=True)

    excess: list[Excess] = []
    recompute = with_recompute.total - intended.total
    if recompute:
        excess.append(
            Excess(
                "activation checkpointing recompute",
                recompute,
                "each decoder layer's forward runs again in the backward (real tokens, intended pairs)",
            )
        )
    forced = with_input_grads.total - with_recompute.total
    if forced:
        excess.append(
            Excess(
                "input gradients forced by checkpointing",
                forced,
                "transformers' checkpointing calls enable_input_require_grads(): frozen first-layer "
                "GEMMs compute input gradients nobody needs",
            )
        )
    pad = padded_linears.total - with_input_grads.total
    if pad:
        n_pad = run.padded_tokens - run.real_tokens
        excess.append(
            Excess(
                "padding: GEMMs on pad tokens",
                pad,
                f"{n_pad} of {run.padded_tokens} token slots are padding, every GEMM runs on them",
            )
        )
    for label, idxs in shape.attention_groups().items():
        members = set(idxs)
        diff = attn_performed.where(component_prefix="attention", layers=members) - padded_linears.where(
            component_prefix="attention", layers=members
        )
        if diff:
            kind = shape.layers[idxs[0]].attention.kind
            excess.append(
                Excess(f"{kind} attention ({len(idxs)} layers, {label}): {run.attn}", diff, path[idxs[0]].why)
            )
    kernel = performed.total - attn_performed.total
    if kernel:
        excess.append(
            Excess(
                "fused attention backward recomputes QK^T",
                kernel,
                f"{run.attn} kernels keep no score matrix, so the backward recomputes it",
            )
        )
    notes = []
    if run.attn in shape.attn_refused:
        notes.append(
            f"transformers will not run {run.attn} for {shape.model_type} ({shape.attn_refused[run.attn]}): "
            "this ledger shows what it would compute; use eager or flex_attention"
        )
    mfu = Mfu.compute(intended.total, performed.total, step_time_s, peak)
    return FlopReport(shape, run, intended, performed, excess, mfu, notes)
