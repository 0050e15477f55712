"""Shipping an adapter safely: its health, the identity of its base, a streaming merge, and what a
quantisation recipe or checkpoint really covers. Every function reads files and headers; none needs a
GPU or loads the base as a model, and none modifies its inputs.

Names load on first use."""

from tuneproof.core.lazy import lazy

_EXPORTS = {
    "Checkpoint": "tuneproof.ship.tensors",
    "open_checkpoint": "tuneproof.ship.tensors",
    "read_header": "tuneproof.ship.tensors",
    "Adapter": "tuneproof.ship.adapter",
    "read_adapter": "tuneproof.ship.adapter",
    "Health": "tuneproof.ship.health",
    "check_adapter": "tuneproof.ship.health",
    "Fingerprint": "tuneproof.ship.identity",
    "fingerprint": "tuneproof.ship.identity",
    "read_fingerprint": "tuneproof.ship.identity",
    "diff_fingerprints": "tuneproof.ship.identity",
    "characterise": "tuneproof.ship.identity",
    "MergeResult": "tuneproof.ship.merge_write",
    "QuantRecipe": "tuneproof.ship.recipe",
    "read_quant_recipe": "tuneproof.ship.recipe",
    "Engine": "tuneproof.ship.quant",
    "engine": "tuneproof.ship.quant",
    "audit_recipe": "tuneproof.ship.quant",
    "audit_checkpoint": "tuneproof.ship.quant",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)
