from __future__ import annotations

import pytest

from tiny_models import TINY, TINY_GEMMA4_KV_SHARED, config_dict
from tuneproof.arch import SUPPORTED_MODEL_TYPES, from_config, tiny_config_path
from tuneproof.core.errors import TuneproofError


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
        ({"model_type": "bert"}, "bert is a bidirectional encoder"),
        ({"model_type": "no_such_model"}, "unsupported model_type 'no_such_model'"),
        ({"hidden_size": 8}, "the config has no model_type"),
    ],
)
def test_bad_configs(cfg: dict, fragment: str) -> None:
    with pytest.raises(TuneproofError, match=fragment):
        from_config(cfg)


def test_refused_attention_implementations_are_data() -> None:
    from contexts import context
    from tuneproof.attention.dispatch import explain
    from tuneproof.flops import Step, flop_report

    gemma2 = from_config(config_dict("gemma2"))
    assert "softcapping" in gemma2.attn_refused["sdpa"]
    assert "sinks" in from_config(config_dict("gpt_oss")).attn_refused["sdpa"]
    assert from_config(config_dict("llama")).attn_refused == {}
    report = flop_report(gemma2, Step(seq_len=32, attn="sdpa"))
    assert any("will not run sdpa for gemma2" in n for n in report.notes)
    assert not flop_report(gemma2, Step(seq_len=32, attn="eager")).notes
    assert "will not run sdpa" in explain(gemma2, context(seq_len=32, batch=1)).notes[0]


def test_every_family_has_a_tiny_config_in_the_parity_tests() -> None:
    """A family the reader accepts is checked against FlopCounterMode (tests/flops/test_counter_parity.py
    parametrises over TINY): a new record without a tiny config fails here."""
    from tuneproof.arch import FAMILIES

    assert set(FAMILIES) == set(TINY)
    assert {**{t: t for t in TINY}, "gemma3": "gemma3_text", "gemma4": "gemma4_text"} == SUPPORTED_MODEL_TYPES


def test_family_records_state_the_differences() -> None:
    from tuneproof.arch import FAMILIES

    moe = {t for t, f in FAMILIES.items() if f.moe}
    assert moe == {"mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "gemma4_text"}
    assert {t: f.router for t, f in FAMILIES.items() if f.moe} == {
        "mixtral": "mlp.gate",
        "qwen2_moe": "mlp.gate",
        "qwen3_moe": "mlp.gate",
        "gpt_oss": "mlp.router",
        "gemma4_text": "router.proj",
    }
    assert [t for t, f in FAMILIES.items() if f.shared_expert] == ["qwen2_moe"]
    assert {t for t, f in FAMILIES.items() if f.post_ffn_norm} == {"gemma2", "gemma3_text", "gemma4_text"}
    assert {t for t, f in FAMILIES.items() if not f.layer_types} == {
        "llama",
        "mistral",
        "mixtral",
        "qwen3_moe",
    }


def test_partial_configs_name_every_default_they_take(capsys) -> None:
    from tuneproof.arch import resolve
    from tuneproof.cli.app import main

    cfg = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    model = resolve(cfg)
    assert model.notes == (
        "intermediate_size not in the config: transformers' default 11008 is used",
        "vocab_size not in the config: transformers' default 32000 is used",
    )
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "config.json"
        p.write_text(json.dumps(cfg))
        assert main(["flops", "--config", str(p), "--seq-len", "64"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: intermediate_size not in the config: transformers' default 11008 is used",
        "warning: vocab_size not in the config: transformers' default 32000 is used",
    ]


def test_a_saved_qwen2_moe_config_with_sliding_window_0_reads_as_no_window() -> None:
    """transformers writes sliding_window 0 for Qwen2-MoE: that means no window, not a bad value."""
    from tiny_models import TINY
    from tuneproof.arch import resolve

    model = resolve({"model_type": "qwen2_moe", **TINY["qwen2_moe"], "sliding_window": 0})
    assert all(layer.attention.window is None for layer in model.shape.layers)
