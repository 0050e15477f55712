"""Attention: the table of attention paths (mask rule, pairs computed), which path each layer really
takes and why (dispatch), flex_attention done safely (block masks, kernel options, recompile guard),
numerics judged against fp32 truth (`tuneproof.commands.adjudicate`)."""

from tuneproof.attention.dispatch import Context, Explanation, LayerExplanation, explain
from tuneproof.attention.flex import (
    FlexSetup,
    RecompileGuard,
    causal_block_mask,
    document_block_mask,
    enable_flex,
    padding_block_mask,
    sliding_block_mask,
)
from tuneproof.attention.kernel_options import (
    KernelChoice,
    choose_for_head_dims,
    choose_kernel_options,
    run_with_smem_fallback,
)
from tuneproof.attention.paths import PATHS, AttentionPath, path
from tuneproof.hardware.capability import parse_capability
from tuneproof.runs.step import Rows

__all__ = [
    "PATHS",
    "AttentionPath",
    "Context",
    "Explanation",
    "FlexSetup",
    "KernelChoice",
    "LayerExplanation",
    "RecompileGuard",
    "Rows",
    "causal_block_mask",
    "choose_for_head_dims",
    "choose_kernel_options",
    "document_block_mask",
    "enable_flex",
    "explain",
    "padding_block_mask",
    "parse_capability",
    "path",
    "run_with_smem_fallback",
    "sliding_block_mask",
]
