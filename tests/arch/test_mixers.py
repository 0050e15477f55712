"""The mixers read by construction: chunked attention (Llama 4), the gated delta rule (Qwen3-Next,
Qwen3.5), MLA (DeepSeek), dense experts (Llama 4), each checked against transformers' own code or a
published config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tuneproof.arch import resolve
from tuneproof.arch.lightning import Lightning
from tuneproof.arch.mixers import DELTA_CHUNK, delta_rule_backward, delta_rule_flops, mixer_flops
from tuneproof.arch.shape import AttentionSpec, DeltaRule, StateSpace
from tuneproof.attention.paths import PATHS, chunk_pieces, intended_for, performed_for
from tuneproof.core.errors import TuneproofError
from tuneproof.flops import Step, flop_report
from tuneproof.runs.step import Rows

CONFIGS = Path(__file__).parent.parent / "data" / "configs"
CHUNKED = AttentionSpec(
    kind="chunked", window=None, num_heads=4, num_kv_heads=2, head_dim=16, v_head_dim=16, chunk=256
)


def test_chunk_pieces_cut_at_absolute_multiples_of_the_chunk() -> None:
    assert chunk_pieces((600,), 256) == [256, 256, 88]
    assert chunk_pieces((100, 300, 112), 256) == [100, 156, 144, 112]  # a packed row


def test_intended_pairs_of_a_chunked_layer_are_causal_inside_each_chunk() -> None:
    rows = Rows.padded(600, [600])
    assert intended_for(rows, CHUNKED) == 2 * (256 * 257 // 2) + 88 * 89 // 2


def test_flex_computes_whole_blocks_inside_chunks_and_sdpa_the_square() -> None:
    rows = Rows.padded(512, [512])
    # two 256-token chunks of two 128-blocks each: 3 causal blocks per chunk
    assert performed_for(PATHS["flex_attention"], rows, CHUNKED).pairs == 6 * 128 * 128
    sdpa = performed_for(PATHS["sdpa"], rows, CHUNKED)
    assert sdpa.pairs == 512 * 512 and sdpa.mask.materialised and "chunk" in sdpa.mask.reason
    short = performed_for(PATHS["sdpa"], Rows.padded(200, [200]), CHUNKED)
    assert not short.mask.materialised and short.pairs == 200 * 201 // 2  # one chunk: is_causal


def test_flash_is_refused_for_chunked_layers_wider_than_the_chunk() -> None:
    wide = performed_for(PATHS["flash_attention_2"], Rows.padded(512, [512]), CHUNKED)
    assert "refused" in wide.why and "create_chunked_causal_mask" in wide.mask.reason


@pytest.mark.parametrize("length", [1, 37, 64, 130])
def test_delta_rule_flops_match_flop_counter_on_transformers_own_kernel(length: int) -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    heads, dk, dv = 2, 16, 8
    rule = DeltaRule(
        q="q",
        k="k",
        v="v",
        dst="o",
        heads=heads,
        key_dim=dk,
        value_dim=dv,
        chunk=DELTA_CHUNK,
        conv_channels=1,
        conv_kernel=4,
    )
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, length, heads, dk, generator=gen, requires_grad=True) for _ in range(2))
    v = torch.randn(1, length, heads, dv, generator=gen, requires_grad=True)
    g = torch.randn(1, length, heads, generator=gen, requires_grad=True)
    beta = torch.rand(1, length, heads, generator=gen, requires_grad=True)
    forward, backward = FlopCounterMode(display=False), FlopCounterMode(display=False)
    with forward:
        out, _ = torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, use_qk_l2norm_in_kernel=True)
    with backward:
        out.sum().backward()
    assert delta_rule_flops(rule, length)[0] == forward.get_total_flops()
    assert delta_rule_backward(rule, length) == backward.get_total_flops()


def test_qwen3_next_layers_are_linear_and_full_in_its_published_pattern() -> None:
    shape = resolve(CONFIGS / "qwen3-next-80b-a3b.json").shape
    kinds = [layer.attention.kind for layer in shape.layers]
    assert kinds[:4] == ["linear", "linear", "linear", "full"] and kinds.count("full") == len(kinds) // 4
    assert shape.mixer_groups and all(shape.layers[i].attention.kind == "full" for g in
                                        shape.attention_groups.values() for i in g)  # fmt: skip
    report = flop_report(shape, Step(seq_len=4096, mode="lora", lora_rank=8))
    # linear in T: the linear-attention rows double with the width, softmax attention quadruples
    wide = flop_report(shape, Step(seq_len=8192, mode="lora", lora_rank=8))
    lin = report.intended.where(component_prefix="linear_attention")
    assert wide.intended.where(component_prefix="linear_attention") == pytest.approx(2 * lin, rel=0.01)


def test_deepseek_mla_reads_its_split_head_dims() -> None:
    shape = resolve(CONFIGS / "deepseek-v3.json").shape
    spec = shape.layers[0].attention
    assert (spec.num_heads, spec.head_dim, spec.v_head_dim) == (128, 192, 128)  # nope 128 + rope 64
    names = [s.name for s in shape.layers[5].steps if hasattr(s, "in_features")]
    assert "self_attn.q_b_proj" in names and "self_attn.kv_b_proj" in names
    dense = sum(1 for layer in shape.layers if not any(getattr(s, "num_experts", 1) > 1 for s in layer.steps))
    assert dense == 3  # first_k_dense_replace


def test_llama4_chunked_layers_and_dense_experts_have_their_lines() -> None:
    shape = resolve(CONFIGS / "llama-4-scout.json").shape
    assert {layer.attention.kind for layer in shape.layers} == {"chunked", "full"}
    assert {layer.attention.chunk for layer in shape.layers if layer.attention.chunk} == {8192}
    report = flop_report(shape, Step(seq_len=16384, mode="lora"))
    names = [e.name for e in report.excess]
    assert "experts run densely: every token through every expert" in names
    assert any(n.startswith("chunked attention") for n in names)


def test_explainer_names_the_delta_rule_paths_and_the_packed_fallback() -> None:
    from contexts import context
    from tuneproof.attention.dispatch import explain

    shape = resolve(CONFIGS / "qwen3-next-80b-a3b.json").shape
    packed = explain(shape, context(seq_len=512, batch=1, packed=True), live=False)
    text = " ".join(packed.notes)
    assert "chunk_gated_delta_rule" in text and "without flash-linear-attention transformers raises" in text


def test_a_rank_above_every_expert_matrix_is_refused_for_target_parameters() -> None:
    from tiny_models import config_dict
    from tuneproof.core.errors import TuneproofError

    shape = resolve(config_dict("qwen3_moe")).shape  # experts: 64 -> 2x32 and 32 -> 64
    experts = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")
    run = dict(seq_len=16, mode="lora", lora_targets=("q_proj",), lora_target_parameters=experts)
    flop_report(shape, Step(**run, lora_rank=64))  # q_proj 64 -> 64 holds rank 64
    with pytest.raises(TuneproofError, match="lora_rank"):
        flop_report(shape, Step(seq_len=16, mode="lora", lora_targets=(), lora_target_parameters=experts,
                                   lora_rank=65))  # fmt: skip


def test_a_layer_weight_no_gemm_accounts_for_is_refused_not_counted_as_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DBRX keeps its experts as stacked 2-D parameters outside any nn.Linear: without its entry in
    STACKED_EXPERTS the experts would cost nothing. The reader refuses instead (before the coverage
    table)."""
    from tiny_models import shrunk_config
    from tuneproof.arch import construct
    from tuneproof.core.errors import TuneproofError

    monkeypatch.setattr(construct, "STACKED_EXPERTS", {})
    with pytest.raises(TuneproofError, match=r"ffn\.experts\.mlp\.w1 .* is no GEMM"):
        construct.read_constructed(shrunk_config("dbrx"), "dbrx")


def test_explain_refuses_flash_for_chunked_layers_past_the_chunk() -> None:
    from contexts import context
    from tuneproof.attention.dispatch import explain

    shape = resolve(CONFIGS / "llama-4-scout.json").shape
    layers = explain(shape, context(seq_len=16384, batch=1, attn="flash_attention_2"), live=False).layers
    chunked = next(x for x in layers if x.layer_type == "chunked")
    full = next(x for x in layers if x.layer_type == "full")
    assert chunked.backend == "refused" and "16384 > chunk 8192" in chunked.refused["flash_attention_2"]
    assert full.backend == "flash_attention_2"


def test_a_family_that_leaves_a_size_field_unused_gets_no_default_note() -> None:
    assert resolve(CONFIGS / "falcon-7b-instruct.json").notes == ()  # no intermediate_size: ffn_hidden_size


def test_lora_on_mamba_out_proj_is_refused_as_peft_refuses_it_and_all_linear_leaves_it_out() -> None:
    from tiny_models import shrunk_config
    from tuneproof.core.errors import TuneproofError
    from tuneproof.measure.model import lora_targets

    shape = resolve(shrunk_config("mamba2")).shape
    with pytest.raises(TuneproofError, match="PEFT refuses LoRA on out_proj"):
        flop_report(shape, Step(seq_len=32, mode="lora", lora_rank=4, lora_targets=("out_proj",)))
    every = flop_report(shape, Step(seq_len=32, mode="lora", lora_rank=4)).performed
    named = flop_report(shape, Step(seq_len=32, mode="lora", lora_rank=4, lora_targets=("in_proj",)))
    assert every.total == named.performed.total  # all-linear here is in_proj alone: out_proj is left out
    assert lora_targets(shape) == ["mixer.in_proj"]


@pytest.mark.parametrize(
    "core",
    [
        StateSpace(
            q="q",
            k="k",
            v="v",
            dst="attn",
            heads=4,
            head_dim=8,
            state=16,
            chunk=0,
            conv_channels=64,
            conv_kernel=4,
        ),
        Lightning(q="q", k="k", v="v", dst="attn", heads=4, head_dim=8, block=0),
    ],
    ids=["ssd chunk 0", "lightning block 0"],
)
def test_a_core_with_no_chunk_refuses_in_one_line(core: Any) -> None:
    """Once a ZeroDivisionError traceback (Mamba-2 chunk_size 0, MiniMax block_size 0)."""
    with pytest.raises(TuneproofError, match=r"mixer with (chunk|block) 0"):
        mixer_flops(core, 64)


def test_lora_on_mamba_dt_proj_says_its_weight_is_a_raw_matmul_and_names_the_models_own_targets() -> None:
    """Once "matches no nn.Linear ... such as q_proj, v_proj, gate_proj": names Mamba does not have."""
    from tiny_models import shrunk_config

    shape = resolve(shrunk_config("mamba")).shape
    with pytest.raises(TuneproofError) as refused:
        flop_report(shape, Step(seq_len=32, mode="lora", lora_rank=4, lora_targets=("dt_proj",)))
    assert "applies dt_proj as a raw matmul with its weight" in refused.value.message
    assert refused.value.hint.endswith("this model's module names: in_proj, x_proj")
