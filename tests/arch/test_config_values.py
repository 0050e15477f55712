"""Published configs accepted for the fields their family leaves null, nonsense refused before any
work: one line, exit 2, no traceback, and the check itself well under a second."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tiny_models import config_dict
from tuneproof.arch import resolve
from tuneproof.arch.values import MAX_PARAMETERS, parameter_estimate
from tuneproof.cli.app import main
from tuneproof.core.errors import TuneproofError

# Shaped like google/gemma-4-31B's config.json: dense (enable_moe_block false) with the MoE fields null.
GEMMA4_31B: dict[str, Any] = {
    "architectures": ["Gemma4ForConditionalGeneration"],
    "model_type": "gemma4",
    "text_config": {
        "model_type": "gemma4_text",
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_hidden_layers": 60,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "num_global_key_value_heads": 4,
        "head_dim": 256,
        "global_head_dim": 512,
        "sliding_window": 1024,
        "vocab_size": 262144,
        "max_position_embeddings": 262144,
        "attention_k_eq_v": True,
        "enable_moe_block": False,
        "moe_intermediate_size": None,
        "num_experts": None,
        "top_k_experts": None,
        "final_logit_softcapping": 30.0,
        "tie_word_embeddings": True,
    },
    "tie_word_embeddings": True,
}
LLAMA: dict[str, Any] = config_dict("llama", intermediate_size=128)
MIXTRAL: dict[str, Any] = {**LLAMA, "model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2}


def _text(**fields: Any) -> dict[str, Any]:
    config = copy.deepcopy(GEMMA4_31B)
    config["text_config"].update(fields)
    return config


def test_the_31b_null_fields_are_transformers_own() -> None:
    """The trap: transformers' Gemma4TextConfig takes the null MoE fields as they are."""
    from transformers import AutoConfig

    config = AutoConfig.for_model("gemma4", **{k: v for k, v in GEMMA4_31B.items() if k != "model_type"})
    assert config.text_config.num_experts is None and config.text_config.moe_intermediate_size is None


def test_gemma4_31b_dense_is_accepted() -> None:
    shape = resolve(GEMMA4_31B).shape
    assert shape.model_type == "gemma4_text" and shape.num_layers == 60
    assert all(lin.num_experts == 1 for lin in shape.linears)  # dense: no routed experts
    kinds = {(layer.attention.window, layer.attention.head_dim) for layer in shape.layers}
    assert kinds == {(1024, 256), (None, 512)}  # sliding layers, and full layers with global_head_dim
    assert 25e9 < parameter_estimate(GEMMA4_31B["text_config"]) < 35e9


def test_the_parameter_bound_leaves_the_largest_open_models() -> None:
    kimi_k2 = {  # moonshotai/Kimi-K2-Instruct's sizes (DeepSeek-V3 layout): about 1.04e12 parameters
        "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
        "n_routed_experts": 384, "moe_intermediate_size": 2048, "intermediate_size": 18432,
        "vocab_size": 163840,
    }  # fmt: skip
    assert 5e11 < parameter_estimate(kimi_k2) < MAX_PARAMETERS / 5


BAD = [
    (_text(num_key_value_heads=64), "text_config: num_key_value_heads 64 is above num_attention_heads 32"),
    (_text(num_key_value_heads=12), "num_key_value_heads 12 does not divide num_attention_heads 32"),
    (_text(num_global_key_value_heads=5), "num_global_key_value_heads 5 does not divide num_attention_heads"),
    (
        _text(enable_moe_block=True, num_experts=8, top_k_experts=9, moe_intermediate_size=704),
        "top_k_experts 9 is above num_experts 8",
    ),
    ({**MIXTRAL, "num_experts_per_tok": 5}, "num_experts_per_tok 5 is above num_local_experts 4"),
    ({**LLAMA, "num_hidden_layers": 10**9}, "num_hidden_layers 1,000,000,000 is above 4,096"),
    ({**LLAMA, "num_hidden_layers": 1e9}, "num_hidden_layers is 1000000000.0"),
    (_text(num_hidden_layers=100_000), "num_hidden_layers 100,000 is above 4,096"),
    ({**LLAMA, "vocab_size": 10**12, "hidden_size": 10**5}, "parameters, above 1e+13"),
    (_text(hidden_size=10**4000), "its sizes describe at least 10^"),
    ({**LLAMA, "num_experts": None, "moe_intermediate_size": [1, 0]}, "moe_intermediate_size is [1, 0]"),
]


@pytest.mark.parametrize("config,fragment", BAD, ids=lambda x: x if isinstance(x, str) else "")
def test_nonsense_is_refused_before_work(config: dict[str, Any], fragment: str) -> None:
    started = time.perf_counter()
    with pytest.raises(TuneproofError) as refused:
        resolve(config)
    assert time.perf_counter() - started < 1.0  # refused from the fields alone, no shape built
    assert fragment in refused.value.message and "\n" not in refused.value.message
    assert refused.value.hint and refused.value.exit_code == 2


def test_a_config_object_is_checked_as_a_dict_is() -> None:
    from transformers import LlamaConfig

    with pytest.raises(TuneproofError, match="num_key_value_heads 3 does not divide num_attention_heads 4"):
        resolve(LlamaConfig(**{**LLAMA, "num_key_value_heads": 3}))


def test_unsupported_families_get_the_same_checks(tmp_path: Path) -> None:
    from tuneproof.ship.layout import read_config

    path = tmp_path / "config.json"
    config = {"model_type": "deepseek_v3", "n_routed_experts": 8, "num_experts_per_tok": 9}
    path.write_text(json.dumps(config))
    with pytest.raises(TuneproofError, match="num_experts_per_tok 9 is above n_routed_experts 8"):
        read_config(path, "config")


def test_lists_a_family_types_as_lists_are_sizes() -> None:
    from tuneproof.arch.values import check_values

    check_values({"intermediate_size": [16384] * 35, "moe_topk": [8, 8]}, "gemma3n / hunyuan")
    with pytest.raises(TuneproofError, match="hidden_size is"):
        check_values({"hidden_size": [64, 64]}, "not a list field")


@pytest.mark.parametrize(
    "patch,fragment",
    [
        ({"num_key_value_heads": 64, "num_attention_heads": 32}, "num_key_value_heads 64 is above"),
        ({"num_hidden_layers": 10**9}, "num_hidden_layers 1,000,000,000 is above 4,096"),
    ],
)
def test_the_command_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], patch: dict[str, Any], fragment: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, **patch}))
    assert main(["flops", "--config", str(path), "--seq-len", "64"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert fragment in err and "Traceback" not in err


def test_a_lora_rank_above_every_adapted_dimension_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    flops = ["flops", "--seq-len", "64", "--mode", "lora"]
    assert main([*flops, "--lora-rank", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --lora-rank 100000 is above 64, the largest min(in_features, out_features)")
    assert err.count("\n") == 1
    assert main([*flops, "--lora-rank", "64", "--json"]) == 0  # q_proj 64 -> 256 is still rank 64
    capsys.readouterr()
    assert main([*flops, "--lora-rank", "9", "--lora-targets", "proj"]) == 2  # the router, 64 -> 8
    assert "--lora-rank 9 is above 8" in capsys.readouterr().err
    assert main(["flops", "--seq-len", "64", "--mode", "full", "--lora-rank", "100000", "--json"]) == 0


@pytest.mark.parametrize(
    "fields,fragment",
    [
        ({"attention_chunk_size": -5}, "attention_chunk_size is -5"),
        ({"num_experts": 8, "num_experts_per_tok": 0}, "num_experts_per_tok is 0 but the config has experts"),
        ({"linear_num_key_heads": 16, "linear_num_value_heads": 30}, "not a multiple of linear_num_key"),
    ],
)
def test_fields_of_the_new_mixers_are_checked(fields: dict, fragment: str) -> None:
    from tuneproof.arch.values import check_values

    with pytest.raises(TuneproofError, match=fragment):
        check_values({"hidden_size": 64, "num_attention_heads": 4, **fields}, "config")


def test_a_batch_past_a_million_rows_is_refused() -> None:
    from tuneproof.flops import Step

    Step(seq_len=8, batch=1 << 20)
    with pytest.raises(TuneproofError, match="batch"):
        Step(seq_len=8, batch=(1 << 20) + 1)


# The trial's nonsense sizes of the newer mixers, each once exit 0 (DeepSeek-V3.2 with negative FLOPs)
# or a ZeroDivisionError traceback (MiniMax block_size, Mamba-2 chunk_size).
NAMED_SIZES = [
    ("deepseek_v32", {"index_topk": -1}, "index_topk is -1"),
    ("deepseek_v32", {"index_topk": 0}, "index_topk is 0"),
    ("deepseek_v32", {"index_n_heads": 0}, "index_n_heads is 0"),
    ("deepseek_v32", {"kv_lora_rank": 0}, "kv_lora_rank is 0"),
    ("mamba", {"state_size": 0}, "state_size is 0"),
    ("recurrent_gemma", {"attention_window_size": -1}, "attention_window_size is -1"),
    ("minimax", {"block_size": 0}, "block_size is 0"),
    ("mamba2", {"chunk_size": 0}, "chunk_size is 0"),
    ("kimi_linear", {"linear_attn_config": {"head_dim": 0}}, "head_dim is 0"),
]


@pytest.mark.parametrize("model_type,fields,fragment", NAMED_SIZES, ids=[f for *_, f in NAMED_SIZES])
def test_sizes_known_by_their_name_are_refused(model_type: str, fields: dict, fragment: str) -> None:
    from tiny_models import shrunk_config

    config = {**shrunk_config(model_type).to_dict(), **fields}
    with pytest.raises(TuneproofError, match=fragment):
        resolve(config)


def test_zero_where_it_means_off_is_accepted() -> None:
    from tuneproof.arch.values import check_values

    check_values({"sliding_window": 0, "shared_intermediate_size": 0, "max_window_layers": 0}, "config")
    check_values({"q_lora_rank": None, "num_experts": 0, "first_k_dense_replace": 0}, "config")


@pytest.mark.parametrize(
    "fields,fragment",
    [
        (
            {"ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 16, "moe_top_k": 20}},
            "moe_top_k 20 is above moe_num_experts 16",
        ),
        ({"num_experts": 256, "num_experts_per_token": 300}, "num_experts_per_token 300 is above"),
    ],
)
def test_top_k_in_dbrx_and_kimi_spellings_is_checked(fields: dict, fragment: str) -> None:
    from tuneproof.arch.values import check_values

    with pytest.raises(TuneproofError, match=fragment):
        check_values({"hidden_size": 64, **fields}, "config")


@pytest.mark.parametrize(
    "config,fragment",
    [  # each once an empty list, an empty reason or "model_type None"
        ({"model_type": "dory"}, "holds none of hidden_size, num_hidden_layers"),
        ({"model_type": "xlstm"}, "holds none of hidden_size, num_hidden_layers"),
        ({**LLAMA, "hidden_size": None}, "'hidden_size': TypeError: Field 'hidden_size' expected int"),
        (
            {**LLAMA, "model_type": "lfm2", "layer_types": ["bogus"] * 2},
            "validate_layer_type': ValueError: The `layer_types` entries must be in",
        ),
        ({k: v for k, v in LLAMA.items() if k != "model_type"}, "the config has no model_type"),
    ],
)
def test_refusals_say_what_is_wrong(config: dict[str, Any], fragment: str) -> None:
    with pytest.raises(TuneproofError) as refused:
        resolve(config)
    assert fragment in refused.value.message and "\n" not in refused.value.message
