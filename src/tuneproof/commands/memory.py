"""`tuneproof memory` as the library runs it: a `MemorySpec` (the step, how it holds its numbers, what
steps it, the card), `prepare(spec)` (every check before any counting) and `run(plan)`: a
`MemoryReport`. The ledger itself is `tuneproof.memory.ledger`, which preflight's memory section runs
too."""

from __future__ import annotations

from tuneproof.core.progress import Progress
from tuneproof.memory.ledger import MemoryPlan, MemorySpec, memory_report, plan_memory
from tuneproof.memory.report import MemoryReport

__all__ = ["MemoryPlan", "MemorySpec", "prepare", "run"]


def prepare(spec: MemorySpec) -> MemoryPlan:
    """The model read, its norms listed, the card and its capability found (an unknown card, a LoRA
    target that adapts nothing, are refused here)."""
    return plan_memory(spec)


def run(plan: MemoryPlan, progress: Progress | None = None) -> MemoryReport:
    """The performed and intended steps, the excess between them, and the fit on the card (quick: no
    progress to report)."""
    return memory_report(plan)
