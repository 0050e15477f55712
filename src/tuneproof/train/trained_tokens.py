"""The tokens that train, read in the loop from the batches the model receives (`TuneproofCallback`):

- `trained(batch)`: a micro-batch's prediction targets, counted as transformers 5.24's Trainer counts
  `num_items_in_batch` (`shift_labels` when the collator sends them, else `labels[..., 1:]` not -100);
- `eos_masked(batch, eos)`: EOS tokens inside the real text whose label is -100 while the token before
  them trains (the mark of a collator that masks the pad id when pad == eos);
- `AccumulationCheck`: once, the loss the Trainer logs against the mean over the trained tokens of each
  whole accumulated step, recomputed from the model's own logits (cross-entropy in fp32, in chunks) or,
  under TRL's fused LM head (SFTTrainer's default in TRL 1.16, no logits returned), summed from its
  per-token log-probabilities.
  transformers divides each micro-batch's summed loss by the step's token count only when the model
  takes `num_items_in_batch` (its forward has **kwargs); otherwise each micro-batch's mean is divided by
  the accumulation steps, and micro-batches of unequal token counts give a different loss (transformers
  issue 37766). The check names which of the two the logged loss is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

IGNORE = -100
CE_CHUNK = 1024  # positions per cross-entropy chunk: logits upcast a chunk at a time
MAX_STEPS = 64  # the check waits this many optimizer steps at most for the first logged loss
# the logged loss and the recomputed mean agree within this (relative): both come from the same logits
# in fp32 and differ only in the order of their sums (~1e-6)
RTOL = 2e-5
EQUAL_COUNTS = " (the two ways of averaging agree on these micro-batches, so accumulation could not show)"


def targets(batch: dict[str, Any]) -> Any:
    """The labels the loss averages over: `shift_labels`, else `labels[..., 1:]`; None without labels."""
    shift = batch.get("shift_labels")
    if shift is not None:
        return shift
    labels = batch.get("labels")
    if labels is None or not hasattr(labels, "dim") or labels.dim() != 2:
        return None
    return labels[..., 1:]


def trained(batch: dict[str, Any]) -> int | None:
    t = targets(batch)
    return None if t is None else int((t != IGNORE).sum())


def eos_masked(batch: dict[str, Any], eos: int | None) -> tuple[int, int]:
    """(EOS tokens in the text masked while the token before trains, EOS tokens that train)."""
    ids, labels = batch.get("input_ids"), batch.get("labels")
    if eos is None or ids is None or labels is None or ids.shape != labels.shape or ids.dim() != 2:
        return 0, 0
    mask = batch.get("attention_mask")
    real = (mask != 0) if mask is not None and mask.dim() == 2 else (ids == ids)
    is_eos = (ids == eos) & real
    before = labels.new_full(labels.shape, IGNORE)
    before[:, 1:] = labels[:, :-1]
    masked = is_eos & (labels == IGNORE) & (before != IGNORE)
    return int(masked.sum()), int((is_eos & (labels != IGNORE)).sum())


def loss_sum(logits: Any, batch: dict[str, Any]) -> float:
    """Summed cross-entropy over the targets, in fp32, from the model's logits (no graph kept)."""
    import torch
    import torch.nn.functional as F

    t = targets(batch)
    with torch.no_grad():
        logits = logits[:, :-1] if batch.get("shift_labels") is None else logits
        total = 0.0
        for row in range(logits.shape[0]):
            for start in range(0, logits.shape[1], CE_CHUNK):
                part = logits[row, start : start + CE_CHUNK].float()
                y = t[row, start : start + CE_CHUNK].to(part.device)
                total += float(F.cross_entropy(part, y, ignore_index=IGNORE, reduction="sum"))
    return total


def _field(output: Any, name: str) -> Any:
    return output.get(name) if isinstance(output, dict) else getattr(output, name, None)


@dataclass(slots=True)
class AccumulatedStep:
    """One optimizer step's micro-batches, as the accumulation check sums them."""

    sums: list[float] = field(default_factory=list)  # per micro-batch: summed cross-entropy
    counts: list[int] = field(default_factory=list)  # per micro-batch: trained tokens
    passed: list[bool] = field(default_factory=list)  # per micro-batch: num_items_in_batch given

    @property
    def token_mean(self) -> float:
        n = sum(self.counts)
        return sum(self.sums) / n if n else math.nan

    @property
    def mean_of_means(self) -> float:
        """transformers' loss when the model does not take num_items_in_batch: each micro-batch's
        mean, divided by the accumulation steps."""
        means = [s / n if n else math.nan for s, n in zip(self.sums, self.counts, strict=True)]
        return sum(means) / len(means) if means else math.nan


@dataclass(kw_only=True, slots=True)
class AccumulationCheck:
    """The once-per-run check: the steps up to the first logged loss, then `judge(reported)`."""

    steps: list[AccumulatedStep] = field(default_factory=list)
    current: AccumulatedStep = field(default_factory=AccumulatedStep)
    done: bool = False
    outcome: str | None = None  # "equal", "changed", "differs", "unchecked"
    line: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)

    def micro(self, output: Any, batch: dict[str, Any], passed: bool) -> None:
        """One micro-batch's forward: its summed loss from the output's logits or, from TRL's fused LM
        head (which returns no logits), from its per-token `log_probs` (zero where the label is -100)."""
        n = trained(batch)
        if n is None:
            return
        logits, log_probs = _field(output, "logits"), _field(output, "log_probs")
        if logits is None and log_probs is None:
            self.finish("unchecked", "the model returns neither logits nor per-token log-probs: not checked")
            return
        if logits is not None:
            total = loss_sum(logits, batch)
        else:
            import torch

            with torch.no_grad():
                total = -float(log_probs.float().sum())
        self.current.sums.append(total)
        self.current.counts.append(n)
        self.current.passed.append(passed)

    def step_end(self) -> None:
        if self.current.counts:
            self.steps.append(self.current)
        self.current = AccumulatedStep()
        if len(self.steps) > MAX_STEPS and not self.done:
            self.finish(
                "unchecked", f"no loss logged in the first {MAX_STEPS} steps: accumulation not checked"
            )

    def finish(self, outcome: str, line: str, **numbers: Any) -> None:
        self.done, self.outcome, self.line, self.numbers = True, outcome, line, numbers
        self.steps.clear()

    def judge(self, reported: float, window: int) -> None:
        """`reported`: the logged loss, the mean of the last `window` steps' losses."""
        steps = self.steps[-window:]
        if len(steps) < window or not steps:
            self.finish("unchecked", "the logged window holds steps the check did not see: not checked")
            return
        expected = sum(s.token_mean for s in steps) / len(steps)
        other = sum(s.mean_of_means for s in steps) / len(steps)
        micro = sum(len(s.counts) for s in steps)
        tokens = sum(sum(s.counts) for s in steps)
        nums = {"reported": reported, "token_mean": expected, "mean_of_means": other, "steps": len(steps),
                "micro_batches": micro, "trained_tokens": tokens}  # fmt: skip
        if not tokens:
            self.finish("unchecked", "the logged steps train no token: their loss is a mean of nothing")
            return
        tol = RTOL * max(1.0, abs(expected))
        if abs(reported - expected) <= tol:
            why = "" if math.isnan(other) or abs(expected - other) > tol else EQUAL_COUNTS
            line = (
                f"the logged loss {reported:.4f} is the mean over the {tokens:,} trained tokens of its "
                f"{len(steps)} step(s), {micro} micro-batches{why}"
            )
            self.finish("equal", line, **nums)
        elif not math.isnan(other) and abs(reported - other) <= tol:
            line = (
                f"the logged loss {reported:.4f} is the mean of the micro-batches' means, not the mean "
                f"over the step's trained tokens ({expected:.4f}): the model does not take "
                "num_items_in_batch, so accumulation weighs a short micro-batch's tokens more "
                "(transformers issue 37766); give its forward **kwargs and pass num_items_in_batch "
                "to its loss"
            )
            self.finish("changed", line, **nums)
        else:
            line = (
                f"the logged loss {reported:.4f} is neither the mean over the trained tokens "
                f"({expected:.4f}) nor the mean of the micro-batches' means ({other:.4f}): a loss of its "
                "own (label smoothing, a custom compute_loss)"
            )
            self.finish("differs", line, **nums)
