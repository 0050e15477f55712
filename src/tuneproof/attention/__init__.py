"""Attention: which path each layer really takes and why (dispatch), flex_attention done safely
(block masks, kernel options, recompile guard), numerics judged against fp32 truth."""

from tuneproof.attention.dispatch import Explanation, LayerExplanation, explain, parse_capability

__all__ = ["Explanation", "LayerExplanation", "explain", "parse_capability"]
