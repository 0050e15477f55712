"""Micro-batch pricing: the FLOP ledger's (intended, performed) FLOPs of every real micro-batch of a
training run, cheaply enough to price each one as it runs (what `TuneproofCallback` logs).

Conventions are the ledger's (`flop_report`): intended FLOPs count each row at its own length (real
tokens, causal skip, window); performed FLOPs count what the attention path computes (every row at
the micro-batch's padded width, skips lost to padding or dense masks), LoRA's missing weight-gradient
GEMMs and recompute as `RunSpec` describes them. Both are exact copies of the ledger (tested), never
an approximation of it: a fit is used only where it reproduces the ledger to 1e-9.

A micro-batch here is `(batch, width, row lengths)`: B rows padded to width T, the real length of
each row (None when no attention mask told them: every row full).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tuneproof.runs.step import RunSpec

# paths whose performed FLOPs depend on the batch only through (B, T, any row padded): the ledger
# is then B x one row's (checked against the ledger itself in tests/train/test_callback.py)
ROW_UNIFORM_PATHS = ("eager", "sdpa")


@dataclass(frozen=True, slots=True)
class StepFlops:
    """One optimizer step: FLOPs summed over its micro-batches, and its wall time."""

    step: int
    intended: float
    performed: float
    seconds: float
    tokens: int  # real tokens
    slots: int  # token slots (batch x padded width)
    micro_batches: int


class RowFit:
    """FLOPs of one row as a function of its length, from the ledger, made cheap: the ledger is fitted
    on sample lengths to a x L + b x L^2 + sum_w c_w x pairs_w(L) (pairs_w(L): query-key pairs of a
    causal window w), and the fit is used only if it reproduces the ledger exactly (relative 1e-9) at
    lengths it was not fitted on; otherwise every length goes to the ledger, memoised. Intended FLOPs
    always fit (linear layers per token, attention per causal pair); performed ones fit for paths
    without width-dependent dispatch or blocks (eager)."""

    def __init__(self, ledger: Any, windows: list[int], seed: int = 0) -> None:
        import numpy as np

        self.ledger = ledger
        self.windows = windows
        self.memo: dict[int, float] = {}
        sample = sorted({2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610}
                        | {w + d for w in windows for d in (-1, 0, 1, w)} - {0, 1})  # fmt: skip
        basis = np.array([self._basis(n) for n in sample])
        values = np.array([self._exact(n) for n in sample])
        self.coef: Any = np.linalg.lstsq(basis, values, rcond=None)[0]
        rng = np.random.default_rng(seed)
        held_out = [int(n) for n in rng.integers(2, 4 * max([610, *windows]), 6)]
        if any(abs(self._fitted(n) - self._exact(n)) > 1e-9 * abs(self._exact(n)) for n in held_out):
            self.coef = None

    def _basis(self, n: int) -> list[float]:
        x = float(n)
        pairs = [x * (x + 1) / 2 if n <= w else w * (w + 1) / 2 + (x - w) * w for w in self.windows]
        return [x, x * x, *pairs]

    def _fitted(self, n: int) -> float:
        return float(sum(c * b for c, b in zip(self.coef, self._basis(n), strict=True)))

    def _exact(self, n: int) -> float:
        if n not in self.memo:
            self.memo[n] = float(self.ledger(n))
        return self.memo[n]

    @property
    def fitted(self) -> bool:
        return self.coef is not None

    def __call__(self, n: int) -> float:
        if n <= 0:
            return 0.0
        return self._fitted(n) if self.coef is not None and n > 1 else self._exact(n)


class MicroBatchLedger:
    """(intended, performed) FLOPs of micro-batches of one run, equal to `flop_report` on each
    micro-batch (tested) at a small fraction of its cost. Intended is a sum over rows (each row's own
    length, `RowFit`); performed is B x one row's for the paths that compute every row alike (eager,
    sdpa: each row at the padded width, the causal skip lost when any row is padded), else the ledger
    on the whole micro-batch, memoised. Work that costs the same whatever the tokens (PEFT's expert
    merges) is priced once per micro-batch, outside the per-row fits."""

    def __init__(self, shape: Any, step: RunSpec) -> None:
        """`step`: the run's step (its attention path, mode, adapters, checkpointing) at any width."""
        self.shape = shape
        self.step = step
        attn = step.attn
        windows = sorted({layer.attention.window for layer in shape.layers if layer.attention.window})
        self.per_micro_batch = self._token_free()
        intended_free, performed_free = self.per_micro_batch
        self.intended = RowFit(lambda n: self._totals(n)[0] - intended_free, windows)
        self.performed: dict[bool, RowFit] = {}
        if attn in ROW_UNIFORM_PATHS:
            self.performed = {
                padded: RowFit(
                    lambda n, p=padded: self._totals(n, 1, (n - 1,) if p else None)[1] - performed_free,
                    windows,
                )
                for padded in (False, True)
            }
        self._batch: dict[tuple[int, tuple[int, ...]], float] = {}

    def _totals(
        self, width: int, batch: int = 1, lengths: tuple[int, ...] | None = None
    ) -> tuple[float, float]:
        from tuneproof.flops.report import step_totals

        return step_totals(self.shape, replace(self.step, seq_len=width, batch=batch, lengths=lengths))

    def _token_free(self) -> tuple[float, float]:
        """(intended, performed) FLOPs a micro-batch costs whatever its tokens (the ledger's
        TOKEN_FREE_COMPONENTS rows: PEFT's expert merges), counted once per micro-batch, not per row."""
        from tuneproof.flops import flop_report
        from tuneproof.flops.ledger import TOKEN_FREE_COMPONENTS

        report = flop_report(self.shape, replace(self.step, seq_len=1, batch=1, lengths=None))
        intended, performed = (
            sum(ledger.where(component_prefix=c) for c in TOKEN_FREE_COMPONENTS)
            for ledger in (report.intended, report.performed)
        )
        return intended, performed

    def prewarm(self, widths: list[int]) -> None:
        """Price these widths now (padded and not) where performed FLOPs are memoised per width."""
        for fit in self.performed.values():
            for width in widths:
                if width > 1:
                    fit(width)

    def micro_batch(self, batch: int, width: int, rows: tuple[int, ...]) -> tuple[float, float]:
        intended_free, performed_free = self.per_micro_batch
        intended = sum(self.intended(length) for length in rows) + intended_free
        padded = any(length < width for length in rows)
        if self.performed:
            return intended, batch * self.performed[padded](width) + performed_free
        key = (width, rows)
        if key not in self._batch:
            self._batch[key] = self._totals(width, batch, rows)[1]
        return intended, self._batch[key]

    def report(self, batch: int, width: int, rows: tuple[int, ...]) -> Any:
        """The whole ledger (`FlopReport`, excess lines named) of one micro-batch of this run."""
        from tuneproof.flops import flop_report

        return flop_report(self.shape, replace(self.step, seq_len=width, batch=batch, lengths=rows))


def rows_of(batch: int, width: int, lengths: Any) -> tuple[int, ...]:
    """Each row's real length: from the attention mask's row sums (a tensor, read here: one device
    sync), or every row full when there was no mask."""
    return tuple(int(x) for x in lengths.tolist()) if lengths is not None else (width,) * batch


def price_step(
    ledger: MicroBatchLedger, step: int, micro_batches: list[tuple[int, int, tuple[int, ...]]], seconds: float
) -> StepFlops:
    """One optimizer step's FLOPs: its micro-batches `(batch, width, row lengths)` priced and summed,
    with the step's wall time."""
    intended = performed = 0.0
    tokens = slots = 0
    for batch, width, rows in micro_batches:
        i, p = ledger.micro_batch(batch, width, rows)
        intended += i
        performed += p
        tokens += sum(rows)
        slots += batch * width
    return StepFlops(step, intended, performed, seconds, tokens, slots, len(micro_batches))


def median_width(counts: dict[int, int]) -> int:
    """The padded width at which half the micro-batches (counted per width) are reached."""
    order = sorted(counts)
    half, total = sum(counts.values()) / 2, 0
    for width in order:
        total += counts[width]
        if total >= half:
            return width
    return order[-1]
