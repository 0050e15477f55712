"""JetMoE's mixture of attention heads (MoA): routed query and output projections around one softmax
attention, as transformers runs it (models/jetmoe/modeling_jetmoe.py, transformers 5.x).

What one layer runs (`JetMoeAttention.forward`, `JetMoeMoA.map` / `JetMoeMoA.reduce`):
- the router (`JetMoeTopKGating.layer`, an nn.Linear hidden -> E) on every token, then top-k;
- `map`: each token's row goes to its k experts; `JetMoeParallelExperts.input_linear` runs
  `F.linear(rows, weight[e])` per expert on exactly its routed rows (k x N rows in all), writing one
  query vector of `num_key_value_heads x kv_channels` per (token, expert): k x kv query heads;
- `kv_proj` (an nn.Linear) writes one key and one value per KV head, repeated k times;
- one attention call over the k x kv heads (`num_attention_heads`), head dim `kv_channels`;
- `reduce`: `output_linear` per expert on the k x N rows, scaled by the router gates, summed.

So the query and output projections cost top_k x N rows each, like routed MLP experts, and the
router's output reaches the layer output through the gates (it gets gradients there, not through q).
Intended and performed are the same: every routed row is work the algorithm needs.

Experts stored (E, out, in) and read with `F.linear` (`EXPERTS_OUT_IN`), unlike the (E, in, out)
`x @ W[e]` storage the fused-expert reader otherwise assumes for a module holding one 3-D weight.
"""

from __future__ import annotations

from typing import Any

from tuneproof.arch.program import Unit
from tuneproof.arch.shape import Join, Linear, ModelShape, Op

# Attention modules that are a mixture of attention heads, by class name (JetMoeAttention.forward).
MOA_MIXERS = frozenset({"JetMoeAttention"})
# Expert modules whose 3-D weight is stored (E, out, in) and applied as F.linear(x, weight[e]), by
# class name. Source: JetMoeParallelExperts.__init__ / forward.
EXPERTS_OUT_IN = frozenset({"JetMoeParallelExperts"})

# The routed projections' names in JetMoeMoA.__init__ (`input_linear`: queries, `output_linear`: the
# output). transformers' default JetMoeConfig (hidden 2048, 16 kv heads of 128) makes both 2048 x 2048.
EXPERT_ROLES = {"q": "input_linear", "o": "output_linear"}

MOA_NOTE = (
    "{count} layers are JetMoE mixture-of-attention layers (JetMoeAttention): the query and output "
    "projections are routed experts (JetMoeParallelExperts, a torch loop of F.linear per expert on its "
    "routed rows; transformers ships no fused MoE kernel for them), and the top_k x num_key_value_heads "
    "query heads go through one call of the chosen attention path"
)


def is_moa(layer: Any) -> bool:
    """The layer's mixer is a mixture of attention heads."""
    from tuneproof.arch.mixers import mixer_module

    found = mixer_module(layer)
    return found is not None and type(found[1]).__name__ in MOA_MIXERS


def moa_steps(units: list[Unit], hidden: int, top_k: int, core: list[Op]) -> list[Op]:
    """The MoA layer program: router and `kv_proj` on the layer input, the routed query projection
    (top_k rows per token), the attention `core` (reading mix.q, mix.k, mix.v, writing attn), the
    routed output projection, and the gates from the router scaling it into "mid"."""
    by_role: dict[str, Unit] = {}
    for u in units:
        if u.kind == "experts":  # by name: with kv heads x kv_channels == hidden both are square
            by_role["o" if EXPERT_ROLES["o"] in u.name else "q"] = u
        elif u.out_features == u.num_experts or "router" in u.name:
            by_role["router"] = u
        else:
            by_role["kv"] = u
    if set(by_role) != {"q", "o", "router", "kv"}:
        from tuneproof.core.errors import TuneproofError

        raise TuneproofError(
            f"the mixture-of-attention projections {[u.name for u in units]} are not a routed query, a "
            "routed output, a router and a kv projection",
            "this mixer is not one tuneproof can read",
        )

    def routed(u: Unit, src: str, dst: str, component: str) -> Linear:
        return Linear(
            name=u.name, in_features=u.in_features, out_features=u.out_features, src=src, dst=dst,
            component=component, tokens_per_token=float(top_k), adaptable=False, num_experts=u.num_experts,
        )  # fmt: skip

    r, kv = by_role["router"], by_role["kv"]
    return [
        Linear(
            name=r.name,
            in_features=r.in_features,
            out_features=r.out_features,
            src="in",
            dst="mix.router",
            component="router",
        ),
        routed(by_role["q"], "in", "mix.q", "q_proj"),
        Linear(
            name=kv.name,
            in_features=kv.in_features,
            out_features=kv.out_features,
            src="in",
            dst="mix.kv",
            component="attention.proj",
        ),
        Join("mix.k", ("mix.kv",)),
        Join("mix.v", ("mix.kv",)),
        *core,
        routed(by_role["o"], "attn", "o", "o_proj"),
        Join("mid", ("in", "o", "mix.router")),
    ]


def moa_notes(shape: ModelShape) -> list[str]:
    """The dispatch explainer's note for mixture-of-attention layers (a routed query projection)."""
    count = sum(
        any(isinstance(s, Linear) and s.component == "q_proj" and s.num_experts > 1 for s in layer.steps)
        for layer in shape.layers
    )
    return [MOA_NOTE.format(count=count)] if count else []
