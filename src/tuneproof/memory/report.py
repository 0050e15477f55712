"""The memory ledger of one step: the peak and what it holds, intended against performed with each
excess named, the fit on a card, and what cannot be derived from a config."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tuneproof.core.verdict import FINDING, OK, Verdict
from tuneproof.hardware.card import GIB, Card
from tuneproof.memory.step import StepMemory
from tuneproof.runs.step import Step

# What a config cannot give, and why: reported as unknown, measured by bench/gpu_check.py on a card.
UNKNOWN = {
    "kernel workspaces": "cuBLAS, cuDNN and flash kernels size their scratch at run time from the card and "
    "the library versions, not from the config",
    "allocator overhead": "memory torch has reserved but not allocated (fragmentation, the caching "
    "allocator's rounding) depends on the order of allocations; PYTORCH_CUDA_ALLOC_CONF="
    "expandable_segments:True reduces it",
    "CUDA context": "the driver's per-process context lives outside torch's allocator "
    "(nvidia-smi counts it, torch.cuda.max_memory_allocated does not)",
}
HEADROOM_WARN = 0.10  # under this share of the card free at the peak, the unknowns above may not fit


@dataclass(frozen=True, slots=True)
class MemoryExcess:
    """Bytes the performed step holds at its peak over the intended one, and why."""

    name: str
    nbytes: int
    why: str


@dataclass(kw_only=True, frozen=True, slots=True)
class Fit:
    """The step on a card: fits or not, headroom, and the largest batch and width that fit."""

    card: Card
    total: int  # the card's bytes the step is fitted against
    fits: bool
    headroom: int
    largest_batch: int  # at the asked width (0: not even one row)
    largest_width: int  # at the asked batch (0: not even the smallest width tried)
    options: tuple[tuple[str, int], ...]  # what else would make the asked step fit: (change, its peak)


@dataclass(kw_only=True, slots=True)
class MemoryReport:
    model_type: str
    run: Step
    performed: StepMemory
    intended: StepMemory
    excess: list[MemoryExcess]
    fit: Fit | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the model's: fields left to transformers' defaults

    @property
    def verdict(self) -> Verdict | None:
        """FITS (exit 0) or OUT_OF_MEMORY (exit 1) on a named card; None without one (a ledger)."""
        if self.fit is None:
            return None
        peak, total = self.performed.peak.peak_bytes, self.fit.total
        if self.fit.fits:
            return Verdict(
                outcome="FITS",
                reason=f"peak {gib(peak)} of the {self.fit.card.name}'s {gib(total)}",
                exit_code=OK,
            )
        return Verdict(
            outcome="OUT_OF_MEMORY",
            reason=f"peak {gib(peak)} > the {self.fit.card.name}'s {gib(total)}",
            exit_code=FINDING,
        )

    def activations_by_component(self) -> dict[str, int]:
        """Everything the step saves for backward (no checkpointing: at the start of backward), by kind."""
        out: dict[str, int] = defaultdict(int)
        for layer in self.performed.layers:
            for item in layer.saved:
                out[item.component] += item.nbytes
        for item in self.performed.model_level:
            out[item.component] += item.nbytes
        return dict(out)

    def render(self, console: Any) -> None:
        from tuneproof.memory.render import render_report

        render_report(self, console)

    def to_dict(self) -> dict[str, Any]:
        p, pr, tr = self.performed, self.run.precision, self.run.training
        top = p.peak.top
        return {
            "model_type": self.model_type,
            "run": {
                "seq_len": self.run.seq_len, "batch": self.run.batch, "attn": self.run.attn,
                "padding_fraction": self.run.padding_fraction, "mode": self.run.mode,
                "grad_ckpt": self.run.grad_ckpt,
            },
            "precision": {"dtype": pr.dtype, "autocast": pr.autocast, "quant": pr.quant},
            "training": {"optimizer": tr.optimizer, "optimizer_impl": tr.optimizer_impl,
                         "grad_accum": tr.grad_accum, "parallel": tr.parallel, "world_size": tr.world_size},
            "peak_bytes": p.peak.peak_bytes,
            "peak_where": top.where,
            "components": _components(p),
            "states": p.states.to_dict(),
            "activations_saved": self.activations_by_component(),
            "backends": _groups(p),
            "points": [point.to_dict() for point in p.peak.points],
            "intended_peak_bytes": self.intended.peak.peak_bytes,
            "excess": [{"name": e.name, "bytes": e.nbytes, "why": e.why} for e in self.excess],
            "fit": _fit_dict(self.fit),
            "verdict": v.to_dict() if (v := self.verdict) is not None else None,
            "unknown": [{"what": k, "why": v} for k, v in UNKNOWN.items()],
            "notes": self.notes,
        }  # fmt: skip


def _components(p: StepMemory) -> dict[str, Any]:
    """What is alive at the peak; `sharding` (DDP's buckets, FSDP2's gathered layers) apart from the
    weights it sits beside, so that the components add up to the total."""
    top = p.peak.top.to_dict()
    sharding = sum(i.nbytes for i in p.sharding)
    return {**top, "weights_and_adapters": int(top["weights_and_adapters"]) - sharding, "sharding": sharding}  # type: ignore[call-overload]


def _groups(p: StepMemory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, backend in p.backends.items():
        key = f"{backend}" + (" (mask materialised)" if p.masked.get(i) else "")
        out.setdefault(key, []).append(i)
    return out


def _fit_dict(fit: Fit | None) -> dict[str, Any] | None:
    if fit is None:
        return None
    return {
        "gpu": fit.card.name, "total_bytes": fit.total, "source": fit.card.memory_source,
        "fits": fit.fits, "headroom_bytes": fit.headroom, "largest_batch": fit.largest_batch,
        "largest_width": fit.largest_width,
        "options": [
            {"change": c, "peak_bytes": b, "fits": b <= fit.total} for c, b in fit.options
        ],
    }  # fmt: skip


def excess_lines(performed: StepMemory, intended: StepMemory, run: Step) -> list[MemoryExcess]:
    """Each attention group whose backend keeps the T x T probabilities (and K, V repeated to every
    head), and the masks built whole, at the bytes they add to the peak."""
    from tuneproof.memory.activations import fused

    groups: dict[str, list[int]] = {}
    for i, backend in performed.backends.items():
        if not fused(backend) or performed.masked.get(i):
            groups.setdefault(backend, []).append(i)
    out = []
    for backend, idxs in groups.items():
        extra = sum(
            performed.layers[i].saved_bytes - intended.layers[i].saved_bytes for i in idxs
        )  # what the layers keep beyond the fused kernel's q, k, v, output and log-sum-exp
        why = performed.why.get(idxs[0], "")
        what = (
            f"{len(idxs)} layer(s) keep B x H x T x T probabilities (B={run.batch}, T={run.seq_len}; "
            + (
                "one layer at a time under checkpointing"
                if run.grad_ckpt
                else "all alive at backward's start"
            )
            + ")"
            if not fused(backend)
            else f"{len(idxs)} layer(s) get a mask: K and V repeated to every query head (no enable_gqa)"
        )
        if extra > 0:
            out.append(MemoryExcess(f"attention on {backend}, layers {_span(idxs)}", extra, f"{what}: {why}"))
    masks = sum(i.nbytes for i in performed.model_level if i.component == "mask")
    if masks >= 1 << 20 and run.grad_ckpt:  # a MiB or more: bool masks of short rows are noise
        out.append(
            MemoryExcess(
                "materialised masks", masks, "(B, 1, T, T) masks are layer inputs under checkpointing"
            )
        )
    return out


def _span(idxs: list[int]) -> str:
    return ", ".join(map(str, idxs)) if len(idxs) <= 6 else f"{idxs[0]}..{idxs[-1]} ({len(idxs)})"


def gib(n: float) -> str:
    """Bytes as GiB, or MiB under one GiB (a tiny model's step)."""
    return f"{n / GIB:,.2f} GiB" if abs(n) >= GIB else f"{n / (1 << 20):,.2f} MiB"
