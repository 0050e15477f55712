"""`tuneproof memory` as the library runs it: a `MemorySpec` (the model, the step, the card),
`prepare(spec)` (the model read, the card found, every check before any counting) and `run(plan)`: a
`MemoryReport`. The ledger itself is `tuneproof.memory.ledger`, which preflight's memory section runs
too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuneproof.arch import ResolvedModel, resolve
from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.hardware.card import Card, card
from tuneproof.memory.ledger import MemoryPlan, memory_report, plan_memory
from tuneproof.memory.report import MemoryReport
from tuneproof.runs.step import Step

__all__ = ["MemoryPlan", "MemorySpec", "prepare", "run"]


@dataclass(kw_only=True, frozen=True, slots=True)
class MemorySpec:
    """One step to size (`run`: its width and batch, how it trains, its precision and optimizer) on
    `model`; `gpu`: a card by name or "auto", to fit the step on (`gpu_memory` for a card the table
    lacks or one that ships in several sizes), or `card`, one already resolved. Checked on construction,
    before a model is read."""

    model: str | Path | ResolvedModel = "tiny"
    run: Step
    gpu: str | None = None
    gpu_memory: float | None = None
    card: Card | None = None

    def __post_init__(self) -> None:
        if self.gpu_memory is not None:
            validate.real("gpu_memory", self.gpu_memory, low=0.001, high=1 << 20, hint="GiB")
        if self.run.mode == "forward":
            raise TuneproofError(
                "{mode} forward has no backward to size", "use full or lora", fields=("mode",)
            )


def prepare(spec: MemorySpec) -> MemoryPlan:
    """The card found and its memory known where one is named (an unknown card, one whose size its name
    does not say, are refused), the model read, its norms listed (a LoRA target that adapts nothing is
    refused here)."""
    chosen = spec.card or card(spec.gpu, memory_gib=spec.gpu_memory)
    if spec.gpu is not None or spec.gpu_memory is not None:
        chosen.memory()  # a card named to fit on must say how much it holds
    return plan_memory(resolve(spec.model), spec.run, chosen)


def run(plan: MemoryPlan, progress: Progress | None = None) -> MemoryReport:
    """The performed and intended steps, the excess between them, and the fit on the card (quick: no
    progress to report)."""
    return memory_report(plan)
