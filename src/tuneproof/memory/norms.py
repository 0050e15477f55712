"""The normalisation layers of each decoder layer, read from the module tree: how many, of which kind,
over how wide a tensor. The shape holds GEMMs only; a norm keeps its input (upcast to fp32) and its
statistics for backward, so the activation ledger needs them.

The tree is the one transformers builds for a copy of the config with the layers cut to the fewest
that hold every layer kind (`tuneproof.arch.small.covering_prefix`), widths kept, on the meta device:
no weights, no memory, well under a second even for a 128-expert model.

Kinds (what autograd keeps, torch 2.13; transformers 5.x modeling files):
- "rms": `x.to(float32)`, `pow(2).mean`, `rsqrt`, `x * rsqrt`, then `weight * normed.to(dtype)`
  (LlamaRMSNorm and its copies): the fp32 input and the (rows, 1) rsqrt for the input's gradient, the
  normed tensor in the model's dtype for the weight's gradient (only when the weight trains).
- "rms_offset": Gemma's `normed * (1 + weight.float())` then `.type_as(x)`: the same, the normed
  tensor kept in fp32, and the `1 + weight` vector.
- "layer": `nn.LayerNorm` (native_layer_norm): the input in its dtype, fp32 mean and rstd per row.
- "centered": a LayerNorm written out in Python (Cohere's): the fp32 input, the centred input and
  the rsqrt, the normed tensor when the weight trains.
- "rms_plain": an RMSNorm with no weight (Gemma 3n's value norm, OLMo's parameter-free norm): the fp32
  input and rsqrt only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuneproof.arch import ResolvedModel


@dataclass(kw_only=True, frozen=True, slots=True)
class Norm:
    """One normalisation module: `name` inside its layer, `kind` (module docstring), `width` the
    normalised size, `rows_per_token` how many rows of that width one token brings (1 over the hidden
    size, the head count for a per-head q/k norm)."""

    name: str
    kind: str
    width: int
    rows_per_token: int


@dataclass(frozen=True, slots=True)
class NormInventory:
    """Norms per decoder layer (index into `shape.layers`) and after the last layer (`final`)."""

    layers: tuple[tuple[Norm, ...], ...]
    final: tuple[Norm, ...]
    source: str


def _kind(module: Any) -> str | None:
    import torch.nn as nn

    name = type(module).__name__
    if isinstance(module, nn.LayerNorm):
        return "layer"
    if name.endswith("LayerNorm") and "RMS" not in name:  # written out in Python: mean-centred
        return "centered" if getattr(module, "weight", None) is not None else "rms_plain"
    if "Norm" not in name or isinstance(module, nn.GroupNorm):
        return None
    weight = getattr(module, "weight", None)
    if weight is None or not hasattr(weight, "shape"):
        return "rms_plain"
    return "rms_offset" if name.startswith("Gemma") else "rms"


def _width(module: Any) -> int | None:
    weight = getattr(module, "weight", None)
    if weight is not None and hasattr(weight, "shape") and len(weight.shape) == 1:
        return int(weight.shape[0])
    for attr in ("normalized_shape", "dim", "hidden_size"):
        value = getattr(module, attr, None)
        if isinstance(value, tuple) and value:
            return int(value[-1])
        if isinstance(value, int):
            return value
    return None


def _rows_per_token(name: str, width: int, attn: Any, hidden: int) -> int:
    """A norm over one head's width runs once per head: query heads, or key/value heads for k/v."""
    if width == hidden or attn is None or width != attn.head_dim:
        return 1
    leaf = name.rsplit(".", 1)[-1]
    return attn.num_kv_heads if leaf.startswith(("k", "v")) else attn.num_heads


def _norms_of(layer: Any, attn: Any, hidden: int) -> tuple[Norm, ...]:
    out: list[Norm] = []
    for name, module in layer.named_modules():
        kind = _kind(module) if name else None
        width = _width(module) if kind else None
        if kind and width and not any(name.startswith(n.name + ".") for n in out):
            out.append(
                Norm(
                    name=name,
                    kind=kind,
                    width=width,
                    rows_per_token=_rows_per_token(name, width, attn, hidden),
                )
            )
    return tuple(out)


def _inventory(model: ResolvedModel) -> NormInventory:
    from tuneproof.arch import resolve
    from tuneproof.arch.construct import decoder_layers, meta_model
    from tuneproof.arch.small import layer_kind, small_copy

    shape = model.shape
    try:  # the first layers that hold every kind
        cut = small_copy(model, narrow=False)
        meta = meta_model(resolve(cut.config).config)
        prefix, built = decoder_layers(meta, cut.layers)
        count, what = cut.layers, cut.what.replace("random weights", "on the meta device")
    except Exception:  # a layer pattern the cut cannot follow (Nemotron-H's pattern string): every layer
        meta = meta_model(model.config)
        prefix, built = decoder_layers(meta, len(shape.layers))
        count, what = len(shape.layers), "the whole model on the meta device"
    kinds = [layer_kind(layer) for layer in shape.layers[:count]]
    per_kind = {
        kind: _norms_of(built[i], shape.layers[i].attention, shape.hidden_size)
        for i, kind in enumerate(kinds)
    }
    layers = tuple(per_kind.get(layer_kind(layer), per_kind[kinds[-1]]) for layer in shape.layers)
    final = tuple(
        Norm(name=name, kind=kind, width=width, rows_per_token=1)
        for name, module in meta.named_modules()
        if name and not name.startswith(prefix + ".") and not any(m in name for m in ("vision", "audio"))
        and (kind := _kind(module)) and (width := _width(module))
    )  # fmt: skip
    return NormInventory(layers, final, what)


def norm_inventory(model: ResolvedModel) -> NormInventory:
    """Every norm of `model`'s layers, read once per model from a meta-device copy of its first layers."""
    return _inventory(model)
