"""JetMoE's mixture of attention heads: routed query and output projections (top_k rows per token)
around one attention call over top_k x num_key_value_heads heads, checked against FlopCounterMode on
transformers' own JetMoeAttention at several lengths."""

from __future__ import annotations

import pytest

from tiny_models import shrunk_config
from tuneproof.arch import resolve
from tuneproof.arch.shape import Linear
from tuneproof.flops import Step, flop_report

MIXER_ROWS = ("router", "q_proj", "attention.", "o_proj")


def _counted(cfg: object, length: int) -> tuple[float, float]:
    """(forward, backward) FLOPs of JetMoeAttention at `length` tokens, eager, training a full model."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.jetmoe.modeling_jetmoe import JetMoeAttention, JetMoeRotaryEmbedding

    cfg._attn_implementation = "eager"  # type: ignore[attr-defined]
    attn = JetMoeAttention(cfg, layer_idx=0)
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.02)
    x = torch.randn(1, length, cfg.hidden_size, requires_grad=True)  # type: ignore[attr-defined]
    pos = JetMoeRotaryEmbedding(cfg)(x, torch.arange(length)[None])
    mask = torch.full((length, length), float("-inf")).triu(1)[None, None]
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        out = attn(x, attention_mask=mask, position_embeddings=pos)[0]
    with backward:
        out.sum().backward()
    return float(forward.get_total_flops()), float(backward.get_total_flops())


def test_jetmoe_query_and_output_projections_are_routed_experts() -> None:
    cfg = shrunk_config("jetmoe")
    steps = {s.component: s for s in resolve(cfg).shape.layers[0].steps if isinstance(s, Linear)}
    q, o = steps["q_proj"], steps["o_proj"]
    width = cfg.kv_channels * cfg.num_key_value_heads
    assert (q.in_features, q.out_features, o.in_features, o.out_features) == (
        cfg.hidden_size, width, width, cfg.hidden_size,
    )  # fmt: skip
    assert q.tokens_per_token == o.tokens_per_token == cfg.num_experts_per_tok
    assert q.num_experts == o.num_experts == cfg.num_local_experts and not q.adaptable


@pytest.mark.parametrize("length", [6, 17, 32])
def test_moa_flops_match_flop_counter_on_transformers_own_attention(length: int) -> None:
    cfg = shrunk_config("jetmoe")
    ledger = flop_report(
        resolve(cfg).shape, Step(seq_len=length, batch=1, attn="eager", mode="full")
    ).performed
    rows = [r for r in ledger.rows if r.layer == 0 and r.component.startswith(MIXER_ROWS)]
    forward = sum(r.flops for r in rows if r.pass_ == "forward")
    backward = sum(r.flops for r in rows if r.pass_ == "backward")
    assert (forward, backward) == _counted(cfg, length)


def test_explainer_names_the_routed_attention_projections() -> None:
    from contexts import context
    from tuneproof.attention.dispatch import explain

    shape = resolve(shrunk_config("jetmoe")).shape
    notes = explain(shape, context(attn="sdpa", seq_len=64, batch=1), live=False).notes
    assert any("JetMoeParallelExperts" in n for n in notes)


def test_transformers_default_jetmoe_config_is_read() -> None:
    """transformers' own JetMoeConfig (hidden 2048, 16 kv heads x 128 kv_channels) makes the routed
    query and output projections both 2048 x 2048: once refused as "not a routed query, a routed
    output, a router and a kv projection" because the roles were told apart by shape."""
    from transformers import JetMoeConfig

    defaults = {**JetMoeConfig().to_dict(), "num_hidden_layers": 4}  # the trial's jetmoe_def.json
    steps = {s.component: s for s in resolve(defaults).shape.layers[0].steps if isinstance(s, Linear)}
    assert "input_linear" in steps["q_proj"].name and "output_linear" in steps["o_proj"].name
    assert steps["q_proj"].out_features == steps["o_proj"].in_features == 2048
