"""Decoder layers that hold several attention and MLP sub-layers (LongCat-Flash), read as one layer
program of two chained sub-layers plus a shortcut MoE.

What one LongCat-Flash layer runs (transformers 5.x models/longcat_flash/modeling_longcat_flash.py
`LongcatFlashDecoderLayer.forward`): attention sub-layer 0 (`self_attn[0]`, an MLA) on the layer
input, its residual; from that residual's norm both the shortcut MoE (`mlp`) and the dense MLP
`mlps[0]`, the MLP's residual; attention sub-layer 1 and its residual; `mlps[1]` on its norm; the
layer output is that residual plus `mlps[1]`'s output plus the shortcut MoE's. The config's
`num_hidden_layers` is twice `num_layers` (it counts attention sub-layers: the cache's layer
indices), so the stack is `num_layers` modules long (`LAYER_COUNT_FIELDS`).

The MoE (`LongcatFlashMoE`): a router whose `classifier` is an nn.Linear whose module is never
called (`LongcatFlashTopkRouter.forward` runs `F.linear(x, classifier.weight)`: a GEMM, but a LoRA
adapter PEFT puts on it never runs), top-k over `n_routed_experts + zero_expert_num` experts, and
`LongcatFlashExperts.forward`: a token routed to one of the `zero_expert_num` zero-compute experts
(`expert_idx >= num_routed_experts`) passes through `nn.Identity` and is only scaled by its routing
weight, no GEMM. How many of the k slots land on zero experts depends on the routing, which no
config states; the ledger counts, as both intended and performed, the share under balanced routing:
k x n_routed / (n_routed + zero_expert_num) GEMM slots per token (`real_expert_slots`). A config
without zero experts is exact; with them the count is an expectation (LongCat-Flash trains its
router's bias to hit a compute budget, so a real checkpoint's share can differ).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tuneproof.arch.program import Unit, ffn_steps, mixer_steps
from tuneproof.arch.shape import Attention, AttentionSpec, Core, Join, Linear, Op

# Decoder layer classes built of sub-layers, by class name -> the config field counting the layers
# of the stack (the ModuleList length). Source: LongcatFlashConfig.num_hidden_layers (a property:
# 2 * num_layers) and LongcatFlashModel.__init__ (range(config.num_layers)).
LAYER_COUNT_FIELDS = {"longcat_flash": "num_layers"}
SUBLAYERED = frozenset({"LongcatFlashDecoderLayer"})
# nn.Linear modules whose forward reads only `.weight` (F.linear on it): GEMMs LoRA never runs.
WEIGHT_ONLY = frozenset({"mlp.router.classifier"})


def layer_count(cfg: Any) -> int:
    """The number of modules in the decoder stack: `num_hidden_layers` unless the family counts its
    stack in another field (`LAYER_COUNT_FIELDS`)."""
    field = LAYER_COUNT_FIELDS.get(cfg.model_type)
    return int(getattr(cfg, field) if field else cfg.num_hidden_layers)


def real_expert_slots(cfg: Any, top_k: int) -> float:
    """GEMM-running expert slots per token: top_k, times the routed experts' share of all experts
    when some are zero-compute (`zero_expert_num`): the expectation under balanced routing."""
    routed, zero = int(cfg.n_routed_experts), int(getattr(cfg, "zero_expert_num", 0) or 0)
    return top_k * routed / (routed + zero)


def _renamed(steps: list[Op], prefix: str, keep: dict[str, str]) -> list[Op]:
    """The steps with every node prefixed (a sub-layer's own nodes), except those in `keep`, which
    are mapped to the given names (the nodes the sub-layer reads from or writes to outside)."""

    def node(n: str) -> str:
        return keep.get(n, f"{prefix}{n}")

    out: list[Op] = []
    for s in steps:
        if isinstance(s, Linear):
            out.append(replace(s, src=node(s.src), dst=node(s.dst)))
        elif isinstance(s, Attention | Core):
            out.append(replace(s, q=node(s.q), k=node(s.k), v=node(s.v), dst=node(s.dst)))
        else:
            assert isinstance(s, Join)
            out.append(Join(node(s.dst), tuple(node(x) for x in s.srcs)))
    return out


def sublayer_program(
    cfg: Any, layer: Any, units: list[Unit], hidden: int, top_k: int | None
) -> tuple[AttentionSpec, tuple[Op, ...], bool]:
    """The program of one LongCat-Flash layer (module docstring): attention 0, MoE and MLP 0 on its
    residual, attention 1, MLP 1; out = the last residual + MLP 1 + the MoE. Both attention
    sub-layers share one geometry (the same MLA class and config). Checkpointing's recompute stops
    before `mlps[1]`'s down projection: only the residual add reads it."""
    from tuneproof.arch.mixers import MixerKind, softmax_spec

    mixer = MixerKind(spec=softmax_spec(cfg, None, layer.self_attn[0]))
    units = [replace(u, kind="router") if u.name in WEIGHT_ONLY else u for u in units]

    def part(head: str) -> list[Unit]:
        return [u for u in units if u.name.startswith(head + ".")]

    steps: list[Op] = []
    for i, src in enumerate(("in", "s0.mlp")):
        attn = mixer_steps(part(f"self_attn.{i}"), hidden, mixer.spec, mixer)
        steps += _renamed(attn, f"a{i}.", {"in": src})
        if i == 0:
            moe = ffn_steps(part("mlp"), hidden, top_k, "in")
            slots = real_expert_slots(cfg, top_k or 1)
            moe = [
                replace(s, tokens_per_token=slots) if isinstance(s, Linear) and s.num_experts > 1 else s
                for s in moe
            ]
            steps += _renamed(moe, "moe.", {"in": "a0.mid"})
        steps += _renamed(ffn_steps(part(f"mlps.{i}"), hidden, None, "in"), f"m{i}.", {"in": f"a{i}.mid"})
        steps.append(Join(f"s{i}.mlp", (f"a{i}.mid", f"m{i}.ffn")))
    steps.append(Join("out", ("s1.mlp", "moe.ffn")))
    return mixer.spec, tuple(steps), True
