"""The memory ledger as the library runs it (`tuneproof memory`, and preflight's memory section): a
`MemorySpec` (the step, how it holds its numbers, what steps it, the card), `plan_memory(spec)` (every
check before any counting) and `memory_report(plan)`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuneproof.arch import ResolvedModel, resolve
from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.memory.cards import Card, card
from tuneproof.memory.norms import NormInventory, norm_inventory
from tuneproof.memory.report import Fit, MemoryReport, excess_lines
from tuneproof.memory.step import Precision, StepMemory, Training, step_memory
from tuneproof.runs.step import MAX_BATCH, RunSpec

MAX_WIDTH = 1 << 20  # the widest row the fit search tries: a million tokens


@dataclass(kw_only=True, frozen=True, slots=True)
class MemorySpec:
    """One step to size (`run`) on `model`, in `precision`, stepped by `training`; `gpu`: a card by
    name or "auto", to fit the step on (`gpu_memory` for a card the table lacks or one that ships in
    several sizes). Checked on construction, before a model is read."""

    model: str | Path | ResolvedModel = "tiny"
    run: RunSpec
    precision: Precision = field(default_factory=Precision)
    training: Training = field(default_factory=Training)
    gpu: str | None = None
    gpu_memory: float | None = None
    capability: tuple[int, int] | None = None  # a card's capability without its name (no fit)

    def __post_init__(self) -> None:
        if self.gpu_memory is not None:
            validate.real("gpu_memory", self.gpu_memory, low=0.001, high=1 << 20, hint="GiB")
        if self.precision.quant is not None and self.run.mode != "lora":
            raise TuneproofError(
                f"{{quant}} {self.precision.quant} with {self.run.mode} fine-tuning",
                "quantised weights do not train: use LoRA (QLoRA)",
                fields=("quant",),
            )
        if self.run.mode == "forward":
            raise TuneproofError(
                "{mode} forward has no backward to size", "use full or lora", fields=("mode",)
            )


@dataclass(kw_only=True, frozen=True, slots=True)
class MemoryPlan:
    model: ResolvedModel
    spec: MemorySpec
    card: Card | None
    capability: tuple[int, int] | None
    norms: NormInventory
    notes: tuple[str, ...] = ()


def plan_memory(spec: MemorySpec) -> MemoryPlan:
    """The model read, its norms listed, the card and its capability found (an unknown card is refused
    here)."""
    from tuneproof.flops.ledger import check_target_parameters, check_targets
    from tuneproof.flops.report import positions_notes

    model = resolve(spec.model)
    if spec.run.mode == "lora":
        check_targets(model.shape, spec.run)
        check_target_parameters(model.shape, spec.run)
    chosen, capability = None, spec.capability
    if spec.gpu is not None:
        from tuneproof.hardware.gpus import capability_of

        chosen = card(spec.gpu, spec.gpu_memory)
        capability = capability_of(spec.gpu)
    elif spec.gpu_memory is not None:
        chosen = card("the card", spec.gpu_memory)
    notes = positions_notes(model, spec.run.seq_len)
    return MemoryPlan(
        model=model, spec=spec, card=chosen, capability=capability, norms=norm_inventory(model), notes=notes
    )


def _step(plan: MemoryPlan, run: RunSpec, fused: bool = False) -> StepMemory:
    s = plan.spec
    return step_memory(
        plan.model, run, s.precision, s.training, capability=plan.capability, norms=plan.norms,
        fused_attention=fused,
    )  # fmt: skip


def memory_report(plan: MemoryPlan) -> MemoryReport:
    """The performed and intended steps, the excess between them, and the fit on the card."""
    spec = plan.spec
    performed = _step(plan, spec.run)
    intended = _step(plan, spec.run, fused=True)
    report = MemoryReport(
        model_type=plan.model.shape.model_type, run=spec.run, precision=spec.precision,
        training=spec.training, performed=performed, intended=intended,
        excess=excess_lines(performed, intended, spec.run), notes=list(plan.notes) + _notes(plan, performed),
    )  # fmt: skip
    if plan.card is not None:
        report.fit = _fit(plan, performed, plan.card)
    return report


def _notes(plan: MemoryPlan, performed: StepMemory) -> list[str]:
    spec, notes = plan.spec, []
    if plan.capability is None:
        notes.append("attention backends as on this machine's CPU: name a card for its own")
    refused = plan.model.shape.attn_refused.get(spec.run.attn)
    if refused:
        model_type = plan.model.shape.model_type
        notes.insert(
            0,
            f"transformers will not run {spec.run.attn} for {model_type} ({refused}): this sizes what "
            f"{spec.run.attn} would keep; size eager, what it runs",
        )
    if spec.precision.quant and any(lin.num_experts > 1 for lin in plan.model.shape.linears()):
        notes.append(
            f"{spec.precision.quant}: the fused experts stay in {spec.precision.dtype} (bitsandbytes "
            "quantises nn.Linear modules only, as transformers loads them)"
        )
    if spec.run.padding_fraction:
        notes.append(
            f"{spec.run.padding_fraction:.0%} of the token slots are padding: they hold activations as real "
            "tokens do (packing or bucketing frees them)"
        )
    if spec.run.mode == "lora" and spec.precision.activation_bytes < 4:
        notes.append(
            "LoRA under autocast: each adapted module keeps its own copy of its input (PEFT casts it to "
            "the fp32 adapter, autocast casts it back), so q, k and v keep three"
        )
    top = performed.peak.top
    loss = 2 * spec.run.batch * spec.run.seq_len * plan.model.shape.vocab_size * 4
    if top.where.startswith("start of backward") and loss > 0.1 * top.total:
        notes.append(
            f"the peak holds the loss's fp32 gradient over B x T x V, twice ({loss / 2**30:.2f} GiB): a "
            "chunked cross-entropy (Liger's fused linear cross-entropy, say) never makes it"
        )
    mixers = plan.model.shape.mixer_groups()
    if mixers:
        count = sum(len(v) for v in mixers.values())
        notes.append(
            f"{count} linear-attention or state-space layer(s): their GEMMs, norms and gates are counted, "
            "not the chunked scan's own intermediates (unknown: they depend on the kernel, fla's or the "
            "torch fallback)"
        )
    if spec.training.optimizer == "adamw_8bit":
        notes.append(
            "8-bit AdamW: parameters under 4,096 elements keep fp32 states (bitsandbytes min_8bit_size)"
        )
    return notes


def _fit(plan: MemoryPlan, performed: StepMemory, chosen: Card) -> Fit:
    run, total = plan.spec.run, chosen.total_bytes

    def peak(**change: Any) -> int:
        return _step(plan, replace(run, **change)).peak.peak_bytes

    batch = _largest(lambda b: peak(batch=b) <= total, MAX_BATCH)
    width = _largest(lambda t: peak(seq_len=t) <= total, MAX_WIDTH)
    options = []
    if not run.grad_ckpt and plan.model.shape.checkpointing:
        options.append(("with activation checkpointing", peak(grad_ckpt=True)))
    if performed.peak.where == "optimizer step" and run.mode == "full":
        options.append(("LoRA instead of full fine-tuning", peak(mode="lora")))
        if plan.spec.training.optimizer != "adamw_8bit":
            eight = replace(plan.spec.training, optimizer="adamw_8bit", optimizer_impl="fused")
            options.append(("8-bit AdamW", step_memory(plan.model, run, plan.spec.precision, eight,
                            capability=plan.capability, norms=plan.norms).peak.peak_bytes))  # fmt: skip
    if performed.backends and any(b in ("math", "eager") for b in performed.backends.values()):
        options.append(("attention on a fused kernel (flex, or SDPA without a mask)",
                        _step(plan, run, fused=True).peak.peak_bytes))  # fmt: skip
    if run.batch > 1 and batch:
        options.append((f"micro-batch {min(batch, run.batch - 1)}", peak(batch=min(batch, run.batch - 1))))
    headroom = total - performed.peak.peak_bytes
    return Fit(
        card=chosen,
        fits=headroom >= 0,
        headroom=headroom,
        largest_batch=batch,
        largest_width=width,
        options=tuple(options),
    )


def _largest(fits: Callable[[int], bool], high: int) -> int:
    """The largest n in [1, high] with fits(n) (fits is monotone: more rows or wider rows need more
    memory), 0 when even 1 does not fit."""
    if not fits(1):
        return 0
    lo, hi = 1, 1
    while hi < high and fits(min(hi * 2, high)):
        lo = hi = min(hi * 2, high)
        if hi == high:
            return high
    hi = min(hi * 2, high)
    while lo + 1 < hi:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
