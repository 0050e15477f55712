"""Decoder layers that run a transformer block whose weights are shared with other layers (Zamba2),
read as one layer program per use.

What one Zamba2 hybrid layer runs (transformers 5.x models/zamba2/modeling_zamba2.py
`Zamba2HybridLayer.forward`): the shared block (`Zamba2AttentionDecoderLayer`) on the layer input
concatenated with the token embeddings (2 x hidden wide): q, k and v projections, each plus this
use's low-rank adapter when `use_shared_attention_adapter` (`Zamba2Attention.forward`:
`q_proj(x) + linear_q_adapter_list[j](x)`), softmax attention, o_proj; no residual; the MLP
(`Zamba2MLP.forward`: gate_up_proj plus this use's adapter, then down_proj); the layer's own
`linear`; then the Mamba-2 layer (`Zamba2MambaDecoderLayer`) on the layer input plus that output,
with its residual. `j` is the layer's place among the hybrid layers (`config.hybrid_layer_ids`).

FLOPs run at each use; the shared weights are one set of parameters (transformers ties each use's
block to the first one, `Zamba2Model.get_layers`), and each use's adapters are its own slot in the
block's adapter lists: only slot `j` runs at use `j`, the other slots are never called there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tuneproof.arch.shape import Attention, Core, Join, Linear, Op

# Layer classes holding a shared transformer block, by class name.
SHARED_BLOCK_LAYERS = frozenset({"Zamba2HybridLayer"})
_ATTN = "shared_transformer.self_attn"
if TYPE_CHECKING:
    from tuneproof.arch.program import Unit
_MLP = "shared_transformer.feed_forward"


def shared_block_mixer(cfg: Any, layer: Any) -> tuple[Any, Core]:
    """The shared block's attention geometry and the Mamba-2 layer's SSD core."""
    from tuneproof.arch.mixers import softmax_spec, ssd_spec

    core = ssd_spec(layer.mamba_decoder.mamba).delta
    assert core is not None
    return softmax_spec(cfg, None, layer.shared_transformer.self_attn), core


def _adapted(
    by_name: dict[str, Unit], base: str, adapter: str, src: str, dst: str, comp: str, tied: bool
) -> list[Op]:
    """`base(x) + adapter(x)` on `src`: the base GEMM, the adapter's two (when this use has one)."""
    b = by_name[base]
    steps: list[Op] = [
        Linear(
            name=b.name,
            in_features=b.in_features,
            out_features=b.out_features,
            src=src,
            dst=f"{dst}.base",
            component=comp,
            tied=tied,
        )
    ]
    down, up = by_name.get(f"{adapter}.0"), by_name.get(f"{adapter}.1")
    if down is None or up is None:  # nn.Identity in this slot
        return [*steps, Join(dst, (f"{dst}.base",))]
    side = "mlp" if comp == "mlp" else "attention.proj"
    steps.append(
        Linear(
            name=down.name,
            in_features=down.in_features,
            out_features=down.out_features,
            src=src,
            dst=f"{dst}.a",
            component=side,
        )
    )
    steps.append(
        Linear(
            name=up.name,
            in_features=up.in_features,
            out_features=up.out_features,
            src=f"{dst}.a",
            dst=f"{dst}.b",
            component=side,
        )
    )
    return [*steps, Join(dst, (f"{dst}.base", f"{dst}.b"))]


def shared_block_program(cfg: Any, index: int, units: list[Unit], core: Core) -> list[Op]:
    """Layer `index`'s program (module docstring): the shared block with use `j`'s adapters, the
    layer's linear, the Mamba-2 layer on the input plus it; "out" is the Mamba-2 residual."""
    from dataclasses import replace

    j = list(cfg.hybrid_layer_ids).index(index)
    tied = j >= int(cfg.num_mem_blocks)  # uses past the first of each block reuse its weights
    by_name = {u.name: u for u in units}
    steps: list[Op] = [Join("cat", ("in", "model:embed"))]  # concat with the embeddings
    for r in "qkv":
        steps += _adapted(
            by_name, f"{_ATTN}.{r}_proj", f"{_ATTN}.linear_{r}_adapter_list.{j}", "cat", r, f"{r}_proj", tied
        )
    o = by_name[f"{_ATTN}.o_proj"]
    steps.append(Attention(q="q", k="k", v="v", dst="attn"))
    steps.append(
        Linear(
            name=o.name,
            in_features=o.in_features,
            out_features=o.out_features,
            src="attn",
            dst="o",
            component="o_proj",
            tied=tied,
        )
    )
    steps += _adapted(
        by_name, f"{_MLP}.gate_up_proj", f"{_MLP}.gate_up_proj_adapter_list.{j}", "o", "gu", "mlp", tied
    )
    down, lin = by_name[f"{_MLP}.down_proj"], by_name["linear"]
    steps.append(
        Linear(
            name=down.name,
            in_features=down.in_features,
            out_features=down.out_features,
            src="gu",
            dst="ffn",
            component="mlp",
            tied=tied,
        )
    )
    steps.append(
        Linear(
            name=lin.name,
            in_features=lin.in_features,
            out_features=lin.out_features,
            src="ffn",
            dst="shared",
            component="mlp",
        )
    )
    steps.append(Join("m.in", ("in", "shared")))
    i, out = by_name["mamba_decoder.mamba.in_proj"], by_name["mamba_decoder.mamba.out_proj"]
    steps.append(
        Linear(
            name=i.name,
            in_features=i.in_features,
            out_features=i.out_features,
            src="m.in",
            dst="mix",
            component="attention.proj",
        )
    )
    steps.append(replace(core, q="mix", k="mix", v="mix", dst="m.core"))
    steps.append(
        Linear(
            name=out.name,
            in_features=out.in_features,
            out_features=out.out_features,
            src="m.core",
            dst="m.o",
            component="o_proj",
        )
    )
    return [*steps, Join("out", ("in", "m.o"))]
