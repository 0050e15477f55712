"""DeepSeek Sparse Attention (deepseek_v32, glm_moe_dsa, axk2, dots3_note): the indexer's scores and
projections run forward only, its scores cover the full square, and the attention it sparsifies still
scores the full square on eager and sdpa; each checked against transformers' own code."""

from __future__ import annotations

from typing import Any

import pytest

from tiny_models import shrunk_config
from tuneproof.arch import resolve
from tuneproof.arch.indexer import (
    forward_without_grad,
    index_pairs,
    index_score_flops,
    indexed_attention_notes,
)
from tuneproof.arch.shape import AttentionSpec, IndexScores, Linear
from tuneproof.attention.paths import PATHS, intended_for, performed_for
from tuneproof.flops import Step, flop_report
from tuneproof.runs.step import Rows

INDEXED = AttentionSpec(
    kind="indexed", window=None, num_heads=4, num_kv_heads=4, head_dim=24, v_head_dim=16, topk=16
)


def _indexer(heads: int, head_dim: int) -> Any:
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Indexer

    cfg = DeepseekV32Config(
        hidden_size=64, q_lora_rank=24, qk_rope_head_dim=8, index_n_heads=heads, index_head_dim=head_dim,
        index_topk=16, num_attention_heads=4,
    )  # fmt: skip
    return DeepseekV32Indexer(cfg, 0)


@pytest.mark.parametrize("length", [1, 16, 37, 100])
def test_index_score_flops_match_flop_counter_on_transformers_own_indexer(length: int) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    heads, head_dim, batch = 4, 32, 2
    indexer = _indexer(heads, head_dim)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, length, 64, generator=gen, requires_grad=True)
    q_resid = torch.randn(batch, length, 24, generator=gen, requires_grad=True)
    cos, sin = torch.ones(batch, length, 8), torch.zeros(batch, length, 8)
    mask = torch.full((length, length), float("-inf")).triu(1).expand(batch, length, length)
    counter = FlopCounterMode(display=False)
    with counter:  # grad mode on, inputs needing gradients: the decorator still turns it off
        picked = indexer(x, q_resid, (cos, sin), mask, None)
    assert not picked.requires_grad and forward_without_grad(indexer)
    projections = 2 * batch * length * (24 * heads * head_dim + 64 * head_dim + 64 * heads)
    scores = index_score_flops(
        IndexScores(q="in", k="in", dst="o", heads=heads, head_dim=head_dim),
        index_pairs([length] * batch, True),
    )
    assert projections + scores == counter.get_total_flops()


def test_only_the_indexer_forward_is_read_as_running_without_gradients() -> None:
    from transformers import DeepseekV32Config
    from transformers.models.deepseek_v32.modeling_deepseek_v32 import DeepseekV32Attention

    cfg = DeepseekV32Config(
        hidden_size=64, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16,
        v_head_dim=16, num_attention_heads=4, num_key_value_heads=4, index_n_heads=4, index_head_dim=32,
    )  # fmt: skip
    attention = DeepseekV32Attention(cfg, 0)
    assert forward_without_grad(attention.indexer) and not forward_without_grad(attention)
    assert not forward_without_grad(attention.q_a_proj)


def test_intended_pairs_are_min_topk_causal_prefix_and_eager_sdpa_score_the_square() -> None:
    rows = Rows.padded(37, [37, 20])
    assert intended_for(rows, INDEXED) == sum(min(16, i) for n in (37, 20) for i in range(1, n + 1))
    for name in ("eager", "sdpa"):  # no padding either: the folded top-k mask is always dense
        got = performed_for(PATHS[name], Rows.padded(37, [37]), INDEXED)
        assert got.pairs == 37 * 37 and got.mask.materialised and "top-k" in got.why


def _shape(model_type: str) -> Any:
    return resolve(shrunk_config(model_type)).shape


def test_indexer_projections_and_scores_are_forward_only_rows() -> None:
    shape = _shape("deepseek_v32")
    frozen = [s for s in shape.layers[0].steps if isinstance(s, Linear) and s.no_grad]
    assert sorted(s.name.rpartition(".")[2] for s in frozen) == ["weights_proj", "wk", "wq_b"]
    report = flop_report(shape, Step(seq_len=37, batch=2, mode="lora", lora_rank=4))
    for ledger in (report.intended, report.performed):
        indexer = [r for r in ledger.rows if r.component.startswith("attention.indexer")]
        assert indexer and all(r.pass_ == "forward" for r in indexer)
    # performed: the full square per row; intended: the causal triangle
    step = next(s for s in shape.layers[0].steps if isinstance(s, IndexScores))
    layers = len(shape.layers)
    assert report.performed.where(component_prefix="attention.indexer_proj") == pytest.approx(
        report.intended.where(component_prefix="attention.indexer_proj")
    )
    performed = report.performed.where(component_prefix="attention.indexer") - report.performed.where(
        component_prefix="attention.indexer_proj"
    )
    assert performed == layers * index_score_flops(step, 2 * 37 * 37)
    names = [e.name for e in report.excess]
    assert "sparse-attention indexer scores every key" in names


def test_lora_on_the_indexer_runs_its_adapter_forward_only() -> None:
    shape = _shape("deepseek_v32")
    run = Step(seq_len=37, batch=2, mode="lora", lora_rank=4, lora_targets=("wq_b",))
    lora = [r for r in flop_report(shape, run).performed.rows if r.component == "lora"]
    assert lora and all(r.pass_ == "forward" for r in lora)


def test_shared_layers_reuse_the_top_k_without_index_scores() -> None:
    from transformers import GlmMoeDsaConfig

    cfg = shrunk_config("glm_moe_dsa").to_dict()
    cfg.update(
        num_hidden_layers=4,
        indexer_types=["full", "shared", "full", "shared"],
        mlp_layer_types=None,
        layer_types=None,
    )
    shape = resolve(GlmMoeDsaConfig(**{k: v for k, v in cfg.items() if k != "model_type"})).shape
    scored = [any(isinstance(s, IndexScores) for s in layer.steps) for layer in shape.layers]
    assert scored == [True, False, True, False]
    assert all(layer.attention.kind == "indexed" for layer in shape.layers)
    (note,) = indexed_attention_notes(shape)
    assert "2 run their own indexer, the other 2 reuse an earlier layer's top-k" in note


def test_axk2_gated_norm_gemms_gate_the_block_after_them() -> None:
    """AXK2GatedRMSNorm's fc1/fc2 run on the layer input before the attention (their output is what
    the attention reads), and the post-attention norm's before the MoE: without that, LoRA's input
    gradients through them go uncounted (the ledger read 0.9916 of FlopCounterMode)."""
    steps = _shape("axk2").layers[1].steps
    names = [s.name for s in steps if isinstance(s, Linear)]
    first = names.index("self_attn.q_a_proj")
    assert names[:first] == ["input_layernorm.mlp.fc1", "input_layernorm.mlp.fc2"]
    assert names.index("post_attention_layernorm.mlp.fc2") < names.index("mlp.gate")
    o_proj = next(s for s in steps if isinstance(s, Linear) and s.component == "o_proj")
    assert o_proj.name == "self_attn.o_proj"


def test_the_dispatch_explainer_notes_the_indexer_and_the_dense_mask() -> None:
    from contexts import context
    from tuneproof.attention.dispatch import explain

    result = explain(_shape("deepseek_v32"), context(seq_len=64, batch=2, attn="sdpa"), live=False)
    assert any("flash-mla" in n and "indexer" in n for n in result.notes)
    # every DeepSeek-V3.2 layer runs its own indexer: once "61 run their own indexer, the others reuse"
    assert any("each runs its own indexer)" in n for n in result.notes)
    assert not any("the others reuse" in n for n in result.notes)


def test_hy_v4_hyper_connections_are_read_as_unadapted_gemms_on_the_streams() -> None:
    """HYV4HyperConnection's F.linear(flat streams, fn) gates the block after it (attention, then the
    MoE); HYV4HyperHead's collapses the streams before the head; its `post` weights multiply each
    block's output, so the recompute does not stop before the last GEMM; and the output projection is
    o_proj, not the attention's later gate_proj (which also writes the hidden size)."""
    shape = _shape("hy_v4")
    layer = shape.layers[1]
    linears = [s for s in layer.steps if isinstance(s, Linear)]
    names = [s.name for s in linears]
    assert names[0] == "attn_hc.fn" and names.index("ffn_hc.fn") > names.index("self_attn.o_proj")
    hc = [s for s in linears if s.component == "hyper_connection"]
    assert len(hc) == 2 and not any(s.adaptable for s in hc) and hc[0].in_features == 4 * shape.hidden_size
    assert next(s for s in linears if s.component == "o_proj").name == "self_attn.o_proj"
    assert [s.name for s in shape.post_steps if isinstance(s, Linear)] == ["model.hc_head.hc_fn"]
    assert not any(layer.recompute_stops_early for layer in shape.layers)
