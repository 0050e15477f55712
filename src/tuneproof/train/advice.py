"""What `TuneproofCallback` warns about, as one-line texts: the first step's padding and slow attention
paths (the explainer's advice, kept where its FLOP excess is material), and compiled flex near
dynamo's recompile limit. The callback raises them as `tuneproof: ...` warnings, once each."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.flops.microbatch import StepFlops
from tuneproof.runs.axolotl import AXOLOTL_PAD_MULTIPLE
from tuneproof.runs.batch import BatchRead
from tuneproof.runs.step import UNKNOWN_PATH

PADDING_WARN = 0.10  # padding share of the first step worth a warning
SLOW_PATH_WARN = 0.02  # attention excess share of the widest first micro-batch worth a warning
RECOMPILE_WARN = 0.8  # share of dynamo's recompile limit worth a warning (past it flex runs eager)


def first_step_warnings(
    run: Any, step: StepFlops, pending: list[BatchRead], bucketed: bool = False
) -> list[str]:
    """One-line warnings from the first step's real batches: the explainer's slow-path advice for its
    widest micro-batch (masks materialised on sliding layers, head_dim past a backend's limit, padded
    batches on global layers), and padding above 10 %. `run` is the callback's reading of the run
    (`read_run`); `pending` the step's micro-batches as read (`read_batch`). `bucketed`:
    the batches come from the bucketing sampler already, so advice to bucket is left out."""
    out = [] if (line := padding_line(step, pending, bucketed)) is None else [line]
    if not pending:
        return out
    out += [line for line in (leak_line(pending, run.attn),) if line is not None]
    if run.attn == UNKNOWN_PATH:  # its dispatch is unknown: the note at train begin said so
        return out
    from tuneproof.attention.dispatch import BUCKET_ADVICE, FLEX_ADVICE, Context, explain

    read = max(pending, key=lambda p: p.width)
    width = read.width
    try:
        seen = replace(
            run.ledger.spec_of(read.seen), mode="full" if run.step.mode == "forward" else run.step.mode
        )
        ctx = Context(step=seen, card=run.card, dtype=run.dtype, dropout=run.dropout)
        advice = explain(run.shape, ctx, live=False).advice
    except TuneproofError as e:  # an attention path or device the explainer does not model
        return [*out, f"the attention dispatch cannot be explained here: {e.message}"]
    if any(r.apart is False for r in pending) and run.hidden_packing():  # flex would not keep them apart
        advice = [a for a in advice if not a.startswith(FLEX_ADVICE)]
    share = _attention_excess_share(run, read)
    if share < SLOW_PATH_WARN:  # the FLOP-only advice would save less than this: not worth a warning
        advice = [a for a in advice if not a.startswith((FLEX_ADVICE, BUCKET_ADVICE))]
    padding = 1 - step.tokens / step.slots if step.slots else 0.0
    if bucketed or _past_longest(step, pending) > padding / 2:  # bucketing would not remove this padding
        advice = [a for a in advice if not a.startswith(BUCKET_ADVICE)]
    return out + [
        f"slow attention path at width {width} ({100 * share:.1f} % of the micro-batch's FLOPs are "
        f"attention excess): {line}"
        for line in advice
    ]


def _past_longest(step: StepFlops, pending: list[BatchRead]) -> float:
    """The share of the step's token slots past each micro-batch's longest row: the collator's padding
    to a multiple (pad_to_multiple_of; Axolotl pads to 64), which bucketing cannot remove."""
    past = sum(r.batch * (r.width - max(r.lengths)) for r in pending)
    return past / step.slots if step.slots else 0.0


def padding_line(step: StepFlops, pending: list[BatchRead], bucketed: bool) -> str | None:
    """The first step's padding above PADDING_WARN, and what to do about it: padding past each
    micro-batch's longest row is the collator's multiple, which bucketing cannot remove; the rest is the
    length spread inside micro-batches, which it can."""
    padding = 1 - step.tokens / step.slots if step.slots else 0.0
    if padding <= PADDING_WARN:
        return None
    found = sorted({r.padding_from for r in pending if r.padding_from and r.padding_from != "attention mask"})
    head = f"{100 * padding:.0f} % of the first step's token slots are padding" + (
        f" (found from {found[0]})" if found else ""
    )
    collator = _past_longest(step, pending)
    multiple = (
        f"{100 * collator:.0f} points of it past each micro-batch's longest row: the collator pads to a "
        f"multiple (pad_to_multiple_of; Axolotl pads to {AXOLOTL_PAD_MULTIPLE})"
    )
    if collator > padding / 2:
        return f"{head}, {multiple}: lower the multiple, or pack"
    also = f"; {multiple}" if collator > PADDING_WARN / 2 else ""
    if bucketed:
        return f"{head} although the batches are bucketed: narrower buckets, or pack{also}"
    return f"{head}: bucket by length (tuneproof.train.bucketing.use_bucketing) or pack{also}"


def _attention_excess_share(run: Any, read: BatchRead) -> float:
    """The ledger's per-attention-group excess (dense squares on sliding layers, is_causal lost to
    padding or packing) as a share of the micro-batch's performed FLOPs."""
    report = run.ledger.report(read)
    groups = {label for label in run.shape.attention_groups}
    excess = sum(e.flops for e in report.excess if any(f", {g})" in e.name for g in groups))
    return excess / report.performed.total if report.performed.total else 0.0


def leak_line(pending: list[BatchRead], attn: str) -> str | None:
    """The first step's packed rows whose documents the kernel lets attend to each other, and why."""
    leaking = [r for r in pending if r.apart is False]
    if not leaking:
        return None
    read = leaking[0]
    return (
        f"the documents packed into {sum(r.batch for r in leaking)} row(s) of the first step (read from "
        f"{read.documents_from}) attend to each other under {attn}: {read.why_not_apart}; the FLOPs are "
        "priced as the kernel runs them (one sequence per row), the intended ones per document"
    )


def recompile_warning(attn: str, recompiles: int, limit: int | None) -> str | None:
    """The warning for compiled flex at `recompiles` frames past its first step, near dynamo's
    `limit` (past it compiled flex falls back to eager); None when not near, or not flex."""
    if attn != "flex_attention" or not limit or recompiles < RECOMPILE_WARN * limit:
        return None
    return (
        f"{recompiles} recompiles, near dynamo's limit of {limit}: past it compiled flex falls back to "
        "eager and materialises every score (bucket the widths, or raise "
        "torch._dynamo.config.recompile_limit)"
    )
