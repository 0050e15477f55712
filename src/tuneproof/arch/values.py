"""Which config values are refused, and why: checked where a config comes in (a dict and its
text_config, or a config object's attributes), before transformers' config class or any shape is
built, so that each refusal is one line and instant.

- Numbers where numbers belong: NaN and infinity are refused; a size is a positive integer (a few
  fields may be a list of them). null means "not used, or transformers' default": a published config
  is never refused for a field its family leaves null (Gemma-4-31B sets `moe_intermediate_size`,
  `num_experts` and `top_k_experts` to null); the config class has the last word.
- Shapes that cannot be built: key/value heads that do not divide the attention heads, a top-k above
  the expert count.
- Sizes no machine holds: more layers than `MAX_LAYERS`, or more parameters than `MAX_PARAMETERS` by
  `parameter_estimate`.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping
from typing import Any, TypeGuard

from tuneproof.core.errors import TuneproofError

# Fields that must be positive integers when a config sets them (None = unset, always accepted).
POSITIVE_INTS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "num_global_key_value_heads",
    "vocab_size",
    "head_dim",
    "global_head_dim",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "top_k_experts",
    "moe_topk",
    "max_position_embeddings",
    "sliding_window",
    "attention_chunk_size",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
)
# Fields a family may set as a list of positive integers, with the config class that types it so.
LISTS = {
    "intermediate_size": "Gemma3nTextConfig (one per layer)",
    "moe_intermediate_size": "Ernie4_5_VLMoeTextConfig (text and vision experts)",
    "moe_topk": "HunYuanMoEV1Config (one per layer)",
}
# Every other size, recognised by its name: an int field named like these must be >= 1 unless null.
# Published configs that set one (each a positive integer there): DeepSeek-V3.2 and GLM-MoE-DSA
# `index_topk`, `index_n_heads`, `index_head_dim`; MLA `kv_lora_rank`, `qk_rope_head_dim`; Mamba
# `state_size`, `time_step_rank`; Mamba-2 `chunk_size`; MiniMax `block_size`; RecurrentGemma
# `attention_window_size`, `lru_width`, `conv1d_width`; Kimi-Linear `linear_attn_config.head_dim`.
SIZE_NAMES = re.compile(r"(_size|_dim|_heads|_rank|topk|_width|window)$")
# Sized-like fields where 0 means "off", each with the config that writes it so (checked on every
# published config in tests/data/configs and every family's default config).
ZERO_MEANS_OFF = {
    "sliding_window": "Qwen2-MoE's save_pretrained (no window)",
    "shared_intermediate_size": "MiniMax-M2 (no shared expert)",
    "max_window_layers": "Qwen2 (a layer count: 0 = every layer sliding)",
}
# Sub-dicts that hold the text model's sizes (checked as part of their level).
NESTED = {"ffn_config": "DBRX", "attn_config": "DBRX", "linear_attn_config": "Kimi-Linear"}
# Grouped-query attention: each key/value head serves num_attention_heads / kv query heads.
KV_HEADS = ("num_key_value_heads", "num_global_key_value_heads")  # Gemma 4's full-attention layers
# Experts each token is routed to, and the experts there are (every pair a config sets is checked).
# (DBRX: ffn_config.moe_top_k of moe_num_experts; Kimi-Linear: num_experts_per_token).
TOP_K = ("num_experts_per_tok", "top_k_experts", "moe_topk", "num_experts_per_token", "moe_top_k")
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
# The layer count under the names transformers' attribute_map gives it (GPT-2 and Bloom: n_layer,
# MPT: n_layers, GPT-Neo: num_layers).
LAYERS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")

# The largest published decoders have about 126 layers (Llama-3.1-405B); the ledger builds one record
# per layer, so a count far beyond is a typo that would otherwise take minutes and gigabytes.
MAX_LAYERS = 4096
# The largest open checkpoints hold about 10**12 parameters (Kimi K2: 1.04 T); 10**13 would be 20 TB
# in bf16, beyond any machine.
MAX_PARAMETERS = 10**13


def check_values(data: Mapping[str, Any], where: str) -> None:
    """Every value check of one config level (a config, or its text_config), in the order they are
    reported: finite numbers, positive sizes, shapes that can be built, sizes that can be held."""
    for key, value in data.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise TuneproofError(
                f"{where}: {key} is {value}", "fix that field: a config holds finite numbers"
            )
    for level, fields in _levels(data, where):
        for key in POSITIVE_INTS:
            if key in fields:
                _check_size(key, fields[key], level)
        _check_named_sizes(fields, level)
    data = _flattened(data)
    _check_heads(data, where)
    _check_linear_heads(data, where)
    _check_top_k(data, where)
    _check_bounds(data, where)


def _levels(data: Mapping[str, Any], where: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The level itself and each of its `NESTED` sub-dicts, with the name each is reported under."""
    subs = [(f"{where} {key}", data[key]) for key in NESTED if isinstance(data.get(key), Mapping)]
    return [(where, data), *subs]


def _flattened(data: Mapping[str, Any]) -> dict[str, Any]:
    """The level's fields with its `NESTED` sub-dicts' fields added under their own names (a name the
    level sets itself wins)."""
    out: dict[str, Any] = {}
    for key in NESTED:
        if isinstance(sub := data.get(key), Mapping):
            out.update(sub)
    out.update(data)
    return out


def _check_named_sizes(data: Mapping[str, Any], where: str) -> None:
    """`SIZE_NAMES` fields not in `POSITIVE_INTS`: an int there is >= 1 (0 where `ZERO_MEANS_OFF`)."""
    for key, value in data.items():
        if key in POSITIVE_INTS or not isinstance(value, int) or isinstance(value, bool):
            continue
        if not SIZE_NAMES.search(key) or value >= 1 or (value == 0 and key in ZERO_MEANS_OFF):
            continue
        raise TuneproofError(f"{where}: {key} is {value!r}", "fix that field: it must be a positive integer")


def config_fields(config: Any) -> dict[str, Any]:
    """The fields `check_values` reads, from a transformers config object (aliases resolved by its
    attribute_map)."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys((*POSITIVE_INTS, *LAYERS)):
        try:
            out[name] = getattr(config, name)
        except AttributeError:
            continue
        except Exception:  # Gemma 4: a per-layer field read globally raises; its layers are checked
            continue  # by the family reader
    own = vars(config) if hasattr(config, "__dict__") else {}
    out.update({k: v for k, v in own.items() if k not in out and SIZE_NAMES.search(k)})
    for key in NESTED:  # DBRX's sub-configs are config objects
        sub = own.get(key)
        to_dict = getattr(sub, "to_dict", None)
        out[key] = to_dict() if callable(to_dict) else sub
    return out


def parameter_estimate(data: Mapping[str, Any]) -> int:
    """A lower bound on the parameters a config's sizes describe, from its fields alone: per layer the
    attention projections (q and o: num_attention_heads x head_dim; k and v: num_key_value_heads x
    head_dim; head_dim defaults to hidden_size / num_attention_heads) and the MLP (3 matrices of
    hidden_size x intermediate_size, or, with experts, 3 per expert of hidden_size x
    moe_intermediate_size), plus the input embeddings (vocab_size x hidden_size). A field the config
    leaves out adds nothing; a list counts its smallest entry."""
    hidden = _smallest(data, ("hidden_size",))
    layers = _smallest(data, LAYERS)
    heads = _smallest(data, ("num_attention_heads",))
    kv = _smallest(data, ("num_key_value_heads",)) or heads
    head_dim = _smallest(data, ("head_dim",)) or (hidden // heads if heads else 0)
    experts = _smallest(data, EXPERT_COUNTS)
    expert_width = _smallest(data, ("moe_intermediate_size", "intermediate_size"))
    dense_width = _smallest(data, ("intermediate_size",))
    mlp = 3 * hidden * (experts * expert_width if experts else dense_width)
    attention = hidden * head_dim * 2 * (heads + kv)
    return layers * (attention + mlp) + _smallest(data, ("vocab_size",)) * hidden


def _is_size(value: Any) -> TypeGuard[int]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) > 0


def _check_size(key: str, value: Any, where: str) -> None:
    if value is None:
        return
    if key == "sliding_window" and value == 0 and not isinstance(value, bool):
        return  # what transformers writes for "no window" (Qwen2-MoE's save_pretrained); read as none
    if key in (*EXPERT_COUNTS, *TOP_K) and value == 0 and not isinstance(value, bool):
        return  # no experts: how Granite 4's dense checkpoints (granitemoehybrid) say it
    if key in LISTS and isinstance(value, list) and value and all(_is_size(v) for v in value):
        return
    if not _is_size(value):
        shape = " or a list of them" if key in LISTS else ""
        raise TuneproofError(
            f"{where}: {key} is {value!r}", f"fix that field: it must be a positive integer{shape}"
        )


def _ints(value: Any) -> tuple[int, ...]:
    """A checked size as a tuple (a list field gives each entry); unset gives ()."""
    if isinstance(value, list):
        return tuple(int(v) for v in value)
    return (int(value),) if _is_size(value) else ()


def _smallest(data: Mapping[str, Any], names: tuple[str, ...]) -> int:
    """The first of `names` the config sets, as an int (a list's smallest entry); 0 when none is set."""
    for name in names:
        values = _ints(data.get(name))
        if values:
            return min(values)
    return 0


def _check_heads(data: Mapping[str, Any], where: str) -> None:
    heads = data.get("num_attention_heads")
    if not _is_size(heads):
        return
    for key in KV_HEADS:
        kv = data.get(key)
        if not _is_size(kv) or heads % kv == 0:
            continue
        problem = "is above" if kv > heads else "does not divide"
        raise TuneproofError(
            f"{where}: {key} {kv} {problem} num_attention_heads {heads}",
            "fix one of them: in grouped-query attention each key/value head serves an equal group "
            "of query heads",
        )


def _check_linear_heads(data: Mapping[str, Any], where: str) -> None:
    """Gated delta-rule layers repeat each key head over a group of value heads (Qwen3-Next)."""
    k, v = data.get("linear_num_key_heads"), data.get("linear_num_value_heads")
    if _is_size(k) and _is_size(v) and v % k:
        raise TuneproofError(
            f"{where}: linear_num_value_heads {v} is not a multiple of linear_num_key_heads {k}",
            "fix one of them: each key head serves an equal group of value heads",
        )


def _check_top_k(data: Mapping[str, Any], where: str) -> None:
    experts = [n for key in EXPERT_COUNTS for n in _ints(data.get(key))]
    for k_key in TOP_K:
        if data.get(k_key) == 0 and experts:  # top-0 means dense only when there are no experts
            raise TuneproofError(
                f"{where}: {k_key} is 0 but the config has experts",
                f"fix it: each token is routed to {k_key} >= 1 experts",
            )
        k = max(_ints(data.get(k_key)), default=0)
        for n_key in EXPERT_COUNTS:
            n = min(_ints(data.get(n_key)), default=0)
            if k and n and k > n:
                raise TuneproofError(
                    f"{where}: {k_key} {k} is above {n_key} {n}",
                    f"fix one of them: each token is routed to {k_key} of the {n_key} experts",
                )


def _check_bounds(data: Mapping[str, Any], where: str) -> None:
    for key in LAYERS:
        layers = data.get(key)
        if _is_size(layers) and layers > MAX_LAYERS:
            raise TuneproofError(
                f"{where}: {key} {layers:,} is above {MAX_LAYERS:,}",
                "fix that field: the largest published decoders have about 126 layers (Llama-3.1-405B), "
                "and tuneproof builds one record per layer",
            )
    estimate = parameter_estimate(data)
    if estimate > MAX_PARAMETERS:
        raise TuneproofError(
            f"{where}: its sizes describe at least {_magnitude(estimate)} parameters, "
            f"above {MAX_PARAMETERS:.0e}",
            "fix the size fields (hidden_size, intermediate_size, num_experts, vocab_size, layers): the "
            "largest open checkpoints hold about 1e+12 parameters",
        )


def _magnitude(n: int) -> str:
    """`n` as 1.2e+15 (or 10^N past what a float holds)."""
    return f"{n:.1e}" if n < 10**300 else f"10^{int(n.bit_length() * math.log10(2))}"
