from __future__ import annotations

import pytest

from tiny_models import TINY, TINY_GEMMA4_KV_SHARED, config_dict
from tuneproof.arch import SUPPORTED_MODEL_TYPES, from_config, tiny_config_path
from tuneproof.errors import TuneproofError


def test_every_family_reads() -> None:
    for model_type in TINY:
        shape = from_config(config_dict(model_type))
        assert shape.num_layers == TINY[model_type]["num_hidden_layers"]


def test_supported_list_covers_the_issue() -> None:
    for t in (
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "qwen3_moe",
        "mixtral",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gemma4",
        "gemma4_text",
        "gpt_oss",
    ):
        assert t in SUPPORTED_MODEL_TYPES


def test_nested_text_config_is_used() -> None:
    nested = {"model_type": "gemma3", "text_config": {**TINY["gemma3_text"], "model_type": "gemma3_text"}}
    assert from_config(nested).model_type == "gemma3_text"


def test_transformers_config_object_is_accepted() -> None:
    from transformers import AutoConfig

    cfg = AutoConfig.for_model("llama", **TINY["llama"])
    assert from_config(cfg).num_layers == 2


def test_gemma4_global_layers_get_their_own_head_dim_kv_heads_and_k_eq_v() -> None:
    shape = from_config(tiny_config_path())
    full = [layer for layer in shape.layers if layer.attention.kind == "full"]
    sliding = [layer for layer in shape.layers if layer.attention.kind == "sliding"]
    assert {layer.attention.head_dim for layer in full} == {64} and {
        layer.attention.num_kv_heads for layer in full
    } == {1}
    assert {layer.attention.head_dim for layer in sliding} == {32} and sliding[0].attention.window == 128
    names = {s.name for s in full[0].steps if hasattr(s, "name")}
    assert "self_attn.v_proj" not in names and "self_attn.k_proj" in names  # attention_k_eq_v


def test_gemma4_kv_shared_layers_have_no_kv_projections() -> None:
    shape = from_config({"model_type": "gemma4_text", **TINY_GEMMA4_KV_SHARED})
    for layer in shape.layers[2:]:
        names = {s.name for s in layer.steps if hasattr(s, "name")}
        assert "self_attn.k_proj" not in names


def test_mistral_slides_everywhere_and_llama_nowhere() -> None:
    assert all(layer.attention.window == 16 for layer in from_config(config_dict("mistral")).layers)
    assert all(layer.attention.window is None for layer in from_config(config_dict("llama")).layers)


@pytest.mark.parametrize(
    "cfg,fragment",
    [
        ({"model_type": "bert"}, "unsupported model_type 'bert'"),
        ({"hidden_size": 8}, "unsupported model_type None"),
    ],
)
def test_bad_configs(cfg: dict, fragment: str) -> None:
    with pytest.raises(TuneproofError, match=fragment):
        from_config(cfg)


def test_refused_attention_implementations_are_data() -> None:
    from tuneproof.attention.dispatch import Context, explain
    from tuneproof.flops import RunSpec, flop_report

    gemma2 = from_config(config_dict("gemma2"))
    assert "softcapping" in gemma2.attn_refused["sdpa"]
    assert "sinks" in from_config(config_dict("gpt_oss")).attn_refused["sdpa"]
    assert from_config(config_dict("llama")).attn_refused == {}
    report = flop_report(gemma2, RunSpec(seq_len=32, attn="sdpa"))
    assert any("will not run sdpa for gemma2" in n for n in report.notes)
    assert not flop_report(gemma2, RunSpec(seq_len=32, attn="eager")).notes
    assert "will not run sdpa" in explain(gemma2, Context(seq_len=32, batch=1)).notes[0]
