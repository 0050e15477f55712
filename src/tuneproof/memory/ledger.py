"""The memory ledger as the library runs it (`tuneproof memory`, and preflight's memory section):
`plan_memory(model, step, card)` (every check before any counting) and `memory_report(plan)`. The step
(`tuneproof.runs.step.Step`) holds how it trains, its precision and what steps it; the card
(`tuneproof.hardware.card.Card`) its capability and memory."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tuneproof.arch import ResolvedModel
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.card import CPU, Card
from tuneproof.memory.norms import NormInventory, norm_inventory
from tuneproof.memory.report import Fit, MemoryReport, excess_lines
from tuneproof.memory.step import StepMemory, step_memory
from tuneproof.runs.step import MAX_BATCH, UNKNOWN_PATH, Step

MAX_WIDTH = 1 << 20  # the widest row the fit search tries: a million tokens


@dataclass(kw_only=True, frozen=True, slots=True)
class MemoryPlan:
    """What the ledger sizes: `run` on `model`, on `card` (its capability picks the attention backends;
    with its memory known, the step is fitted on it)."""

    model: ResolvedModel
    run: Step
    card: Card
    norms: NormInventory
    notes: tuple[str, ...] = ()


def plan_memory(model: ResolvedModel, run: Step, card: Card = CPU) -> MemoryPlan:
    """The step's checks, the model's norms listed: what a step without a backward, an attention
    implementation tuneproof does not model, or a LoRA that adapts nothing cannot be sized for."""
    from tuneproof.arch.targets import check

    if run.mode == "forward":
        raise TuneproofError("{mode} forward has no backward to size", "use full or lora", fields=("mode",))
    if run.attn == UNKNOWN_PATH:
        raise TuneproofError(
            "the attention implementation is not one tuneproof models: what its kernel keeps for backward "
            "is unknown",
            "size the step on the path it runs ({attn})",
            fields=("attn",),
        )
    if run.mode == "lora":
        check(model.shape, run.lora, run.mode)
    notes = model.positions_notes(run.seq_len)
    return MemoryPlan(model=model, run=run, card=card, norms=norm_inventory(model), notes=notes)


def _step(plan: MemoryPlan, run: Step, fused: bool = False) -> StepMemory:
    return step_memory(plan.model, run, card=plan.card, norms=plan.norms, fused_attention=fused)


def memory_report(plan: MemoryPlan) -> MemoryReport:
    """The performed and intended steps, the excess between them, and the fit on the card when its
    memory is known."""
    performed = _step(plan, plan.run)
    intended = _step(plan, plan.run, fused=True)
    report = MemoryReport(
        model_type=plan.model.shape.model_type, run=plan.run, performed=performed, intended=intended,
        excess=excess_lines(performed, intended, plan.run), notes=list(plan.notes) + _notes(plan, performed),
        warnings=list(plan.model.notes),
    )  # fmt: skip
    if plan.card.total_bytes is not None:
        report.fit = _fit(plan, performed, plan.card, plan.card.total_bytes)
    return report


def _notes(plan: MemoryPlan, performed: StepMemory) -> list[str]:
    notes: list[str] = []
    run, precision, training = plan.run, plan.run.precision, plan.run.training
    if plan.card.capability is None:
        notes.append("attention backends as on this machine's CPU: name a card for its own")
    refused = plan.model.shape.attn_refused.get(run.attn)
    if refused:
        model_type = plan.model.shape.model_type
        notes.insert(
            0,
            f"transformers will not run {run.attn} for {model_type} ({refused}): this sizes what "
            f"{run.attn} would keep; size eager, what it runs",
        )
    if precision.quant and any(lin.num_experts > 1 for lin in plan.model.shape.linears):
        notes.append(
            f"{precision.quant}: the fused experts stay in {precision.dtype} (bitsandbytes "
            "quantises nn.Linear modules only, as transformers loads them)"
        )
    if run.padding_fraction:
        notes.append(
            f"{run.padding_fraction:.0%} of the token slots are padding: they hold activations as real "
            "tokens do (packing or bucketing frees them)"
        )
    if run.mode == "lora" and precision.activation_bytes < 4:
        notes.append(
            "LoRA under autocast: each adapted module keeps its own copy of its input (PEFT casts it to "
            "the fp32 adapter, autocast casts it back), so q, k and v keep three"
        )
    top = performed.peak.top
    loss = 2 * run.batch * run.seq_len * plan.model.shape.vocab_size * 4
    if top.where.startswith("start of backward") and loss > 0.1 * top.total:
        notes.append(
            f"the peak holds the loss's fp32 gradient over B x T x V, twice ({loss / 2**30:.2f} GiB): a "
            "chunked cross-entropy (Liger's fused linear cross-entropy, say) never makes it"
        )
    mixers = plan.model.shape.mixer_groups
    if mixers:
        count = sum(len(v) for v in mixers.values())
        notes.append(
            f"{count} linear-attention or state-space layer(s): their GEMMs, norms and gates are counted, "
            "not the chunked scan's own intermediates (unknown: they depend on the kernel, fla's or the "
            "torch fallback)"
        )
    if training.optimizer == "adamw_8bit":
        notes.append(
            "8-bit AdamW: parameters under 4,096 elements keep fp32 states (bitsandbytes min_8bit_size)"
        )
    return notes


def _fit(plan: MemoryPlan, performed: StepMemory, chosen: Card, total: int) -> Fit:
    run = plan.run

    def peak(**change: Any) -> int:
        return _step(plan, replace(run, **change)).peak.peak_bytes

    batch = _largest(lambda b: peak(batch=b) <= total, MAX_BATCH)
    width = _largest(lambda t: peak(seq_len=t) <= total, MAX_WIDTH)
    options = []
    if not run.grad_ckpt and plan.model.shape.checkpointing:
        options.append(("with activation checkpointing", peak(grad_ckpt=True)))
    if performed.peak.where == "optimizer step" and run.mode == "full":
        options.append(("LoRA instead of full fine-tuning", peak(mode="lora")))
        if run.training.optimizer != "adamw_8bit":
            eight = replace(run.training, optimizer="adamw_8bit", optimizer_impl="fused")
            options.append(("8-bit AdamW", _step(plan, replace(run, training=eight)).peak.peak_bytes))
    if performed.backends and any(b in ("math", "eager") for b in performed.backends.values()):
        options.append(("attention on a fused kernel (flex, or SDPA without a mask)",
                        _step(plan, run, fused=True).peak.peak_bytes))  # fmt: skip
    if run.batch > 1 and batch:
        options.append((f"micro-batch {min(batch, run.batch - 1)}", peak(batch=min(batch, run.batch - 1))))
    headroom = total - performed.peak.peak_bytes
    return Fit(
        card=chosen,
        total=total,
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
