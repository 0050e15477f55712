"""FLOP accounting: intended vs performed ledgers, named excess, MFU."""

from tuneproof.flops.effects import EFFECTS, Effect
from tuneproof.flops.ledger import Ledger, Row, WalkState
from tuneproof.flops.report import Excess, FlopReport, Mfu, flop_report
from tuneproof.runs.step import MODES, RunSpec, Step

__all__ = [
    "EFFECTS",
    "MODES",
    "Effect",
    "Excess",
    "FlopReport",
    "Ledger",
    "Mfu",
    "Row",
    "RunSpec",
    "Step",
    "WalkState",
    "flop_report",
]
