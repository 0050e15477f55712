"""DBRX's experts stored as stacked 2-D parameters (DbrxExpertGLU w1, v1, w2 of shape
(E * ffn_hidden_size, hidden_size)) are read as E routed experts, checked against FlopCounterMode on
transformers' own DbrxExperts loop."""

from __future__ import annotations

import pytest

from tiny_models import shrunk_config
from tuneproof.arch import resolve
from tuneproof.arch.shape import Linear
from tuneproof.flops import Step, flop_report


def test_dbrx_stacked_weights_are_read_as_routed_experts() -> None:
    cfg = shrunk_config("dbrx")
    ffn = cfg.ffn_config
    experts = {
        s.name.rpartition(".")[2]: s
        for s in resolve(cfg).shape.layers[0].steps
        if isinstance(s, Linear) and s.component == "experts"
    }
    h, f = cfg.d_model, ffn.ffn_hidden_size
    assert {k: (e.in_features, e.out_features) for k, e in experts.items()} == {
        "w1": (h, f), "v1": (h, f), "w2": (f, h),
    }  # fmt: skip
    assert all(
        e.num_experts == ffn.moe_num_experts and e.tokens_per_token == ffn.moe_top_k for e in experts.values()
    )


@pytest.mark.parametrize("tokens", [5, 16, 33])
def test_dbrx_expert_flops_match_flop_counter_on_transformers_own_loop(tokens: int) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.dbrx.modeling_dbrx import DbrxExperts

    cfg = shrunk_config("dbrx")
    ffn = cfg.ffn_config
    ffn.hidden_size = cfg.d_model
    module = DbrxExperts(ffn)
    for p in module.parameters():
        torch.nn.init.normal_(p)
    x = torch.randn(1, tokens, cfg.d_model, requires_grad=True)
    gen = torch.Generator().manual_seed(tokens)
    index = torch.stack(
        [torch.randperm(ffn.moe_num_experts, generator=gen)[: ffn.moe_top_k] for _ in range(tokens)]
    )
    weights = torch.rand(tokens, ffn.moe_top_k)
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        out = module(x, index, weights)
    with backward:
        out.sum().backward()

    ledger = flop_report(
        resolve(cfg).shape, Step(seq_len=tokens, batch=1, attn="eager", mode="full")
    ).performed
    rows = [r for r in ledger.rows if r.layer == 0 and r.component == "experts"]
    assert sum(r.flops for r in rows if r.pass_ == "forward") == forward.get_total_flops()
    assert sum(r.flops for r in rows if r.pass_ == "backward") == backward.get_total_flops()
