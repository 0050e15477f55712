"""FLOP accounting: intended vs performed ledgers, named excess, MFU."""

from tuneproof.flops.attention import ATTN_PATHS, flex_block_pairs, intended_pairs, performed_pairs
from tuneproof.flops.ledger import Ledger, Row
from tuneproof.flops.report import Excess, FlopReport, Mfu, flop_report
from tuneproof.flops.run import MODES, RunSpec

__all__ = [
    "ATTN_PATHS",
    "MODES",
    "Excess",
    "FlopReport",
    "Ledger",
    "Mfu",
    "Row",
    "RunSpec",
    "flex_block_pairs",
    "flop_report",
    "intended_pairs",
    "performed_pairs",
]
