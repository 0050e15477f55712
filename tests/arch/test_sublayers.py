"""LongCat-Flash's layers of two attention and MLP sub-layers plus a shortcut MoE with zero-compute
experts: the stack read by its own layer count, and the zero experts costed as no GEMM, checked
against FlopCounterMode on transformers' own experts module."""

from __future__ import annotations

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.shape import Attention, Linear
from tuneproof.arch.sublayers import real_expert_slots

SIZES = dict(
    hidden_size=32, ffn_hidden_size=48, expert_ffn_hidden_size=16, num_attention_heads=2, vocab_size=64,
    q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, head_dim=4,
)  # fmt: skip


def _config(zero: int, layers: int = 2) -> object:
    from transformers import LongcatFlashConfig

    return LongcatFlashConfig(
        **SIZES, num_layers=layers, n_routed_experts=4, zero_expert_num=zero, moe_topk=2
    )


@pytest.mark.parametrize("tokens", [1, 6, 30])
def test_zero_experts_run_no_gemm_and_balanced_routing_gives_the_ledgers_slots(tokens: int) -> None:
    """Every token's two slots walk all six experts in turn (balanced routing): only the slots on
    the four real experts run GEMMs, as many as `real_expert_slots` says per token."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashExperts

    cfg = _config(zero=2)
    experts = LongcatFlashExperts(cfg)
    torch.nn.init.normal_(experts.gate_up_proj)
    torch.nn.init.normal_(experts.down_proj)
    h, i, total = cfg.hidden_size, cfg.expert_ffn_hidden_size, 6
    index = torch.arange(tokens * 2).remainder(total).view(tokens, 2)
    weights = torch.full((tokens, 2), 0.5)
    counter = FlopCounterMode(display=False)
    with counter:
        experts(torch.randn(tokens, h), index, weights)
    real = int((index < cfg.n_routed_experts).sum())
    per_slot = 2 * h * 2 * i + 2 * i * h  # gate_up, then down
    assert counter.get_total_flops() == real * per_slot
    if tokens * 2 % total == 0:  # whole rounds of the six experts: exactly balanced
        assert real == tokens * real_expert_slots(cfg, 2)


def test_the_stack_is_read_by_its_layer_count_with_two_attention_sublayers_each() -> None:
    shape = resolve(_config(zero=2, layers=3)).shape
    assert shape.num_layers == 3  # num_hidden_layers is 6: it counts attention sub-layers
    layer = shape.layers[0]
    assert sum(isinstance(s, Attention) for s in layer.steps) == 2
    assert layer.attention.head_dim == 12 and layer.attention.v_head_dim == 8  # the MLA's, not head_dim
    experts = [s for s in layer.steps if isinstance(s, Linear) and s.num_experts > 1]
    assert {s.tokens_per_token for s in experts} == {2 * 4 / 6}
    assert shape.layers[0].recompute_stops_early


def test_the_router_classifier_is_a_gemm_lora_never_wraps() -> None:
    """LongcatFlashTopkRouter.forward runs F.linear on classifier.weight, never the module."""
    shape = resolve(_config(zero=0)).shape
    (router,) = [
        s for s in shape.layers[0].steps if isinstance(s, Linear) and s.name == "mlp.router.classifier"
    ]
    assert router.component == "router" and not router.adaptable


def test_explainer_counts_two_attention_calls_per_layer_and_no_differential_attention() -> None:
    """LongCat's two attention sub-layers were once reported as DiffLlama's differential attention
    (the note counted Attention steps per layer)."""
    from contexts import context
    from tuneproof.attention.dispatch import explain

    shape = resolve(_config(zero=0, layers=3)).shape
    result = explain(shape, context(attn="sdpa", seq_len=64, batch=1), live=False)
    assert not any("differential" in n for n in result.notes)
    assert [(x.num_layers, x.attention_calls) for x in result.layers] == [(3, 6)]


def test_num_layers_alone_gives_no_default_layer_count_warning() -> None:
    """LongCat-Flash's checkpoint sets num_layers (num_hidden_layers is derived, 2 x num_layers): once
    warned "num_hidden_layers not in the config: transformers' default 56 is used"."""
    resolved = resolve({"model_type": "longcat_flash", **SIZES, "num_layers": 3, "n_routed_experts": 4})
    assert resolved.shape.num_layers == 3
    assert not any("num_hidden_layers" in n for n in resolved.notes)
