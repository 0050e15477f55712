"""How a checkpoint's config.json says its weights are stored: its `quantization_config`, read once for
every reader (preflight's quantised-base check, quant-audit, merge).

transformers 5.24 looks for it at the top of the config, then in the decoder's text config
(`quantizers.auto.get_hf_quantizer`); `quant_method` names the format (`AUTO_QUANTIZATION_CONFIG_MAPPING`
keys, plus "bitsandbytes", which the mapping splits by load_in_4bit / load_in_8bit). `FORMATS` holds, for
the formats published checkpoints use, the fields that say how the weights are stored; a method not in
it is still named, with every scalar field it writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class QuantFormat:
    method: str  # quant_method as config.json writes it
    what: str  # the format in words
    fields: tuple[str, ...]  # the keys that say how the weights are stored, shown in this order


# Ordered as published checkpoints use them most (the order `describe` never depends on).
FORMATS: dict[str, QuantFormat] = {
    f.method: f
    for f in (
        QuantFormat(
            "fp8",
            "FP8 weights with one scale per block (transformers' FineGrainedFP8Config; DeepSeek-V3)",
            ("fmt", "weight_block_size", "activation_scheme", "modules_to_not_convert"),
        ),
        QuantFormat(
            "mxfp4",
            "MXFP4 blocks of 32 4-bit floats sharing a power-of-two scale (transformers' Mxfp4Config; "
            "gpt-oss)",
            ("modules_to_not_convert",),
        ),
        QuantFormat(
            "compressed-tensors",
            "compressed-tensors (llm-compressor's format)",
            ("format", "quantization_status", "config_groups", "ignore"),
        ),
        QuantFormat("modelopt", "NVIDIA ModelOpt", ("quant_algo", "kv_cache_quant_algo", "exclude_modules")),
        QuantFormat("awq", "AWQ integer weights", ("bits", "group_size", "zero_point", "version")),
        QuantFormat("gptq", "GPTQ integer weights", ("bits", "group_size", "desc_act", "sym")),
        QuantFormat(
            "bitsandbytes",
            "bitsandbytes",
            ("load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant"),
        ),
        QuantFormat(
            "fbgemm_fp8", "FBGEMM FP8 (per-row scales)", ("activation_scale_ub", "modules_to_not_convert")
        ),
        QuantFormat("torchao", "torchao", ("quant_type",)),
    )
}


@dataclass(frozen=True, slots=True)
class StoredQuantisation:
    """A checkpoint's declared storage: `method` its quant_method (None: the config writes none),
    `fields` the keys that say how (the record's, else every scalar the config writes), `where` the
    config key it was found under."""

    method: str | None
    fields: dict[str, Any]
    where: str

    @property
    def format(self) -> QuantFormat | None:
        return FORMATS.get(self.method or "")

    def describe(self) -> str:
        """`fp8 (fmt e4m3, weight_block_size [128, 128], activation_scheme dynamic)`."""
        shown = ", ".join(f"{k} {_value(v)}" for k, v in self.fields.items())
        name = self.method if self.method is not None else "no quant_method"
        return f"{name} ({shown})" if shown else name


def stored_quantisation(config: dict[str, Any] | None) -> StoredQuantisation | None:
    """The config's quantization_config (top level, else its text_config's, as transformers looks), or
    None when it has none; a quantization_config that is not an object is reported as its type."""
    for where, holder in (("quantization_config", config), ("text_config.quantization_config", None)):
        if holder is None:
            text = (config or {}).get("text_config")
            holder = text if isinstance(text, dict) else {}
        q = (holder or {}).get("quantization_config")
        if not q:  # None or empty: transformers' `or` passes over it too
            continue
        if not isinstance(q, dict):
            return StoredQuantisation(None, {"type": type(q).__name__}, where)
        method = q.get("quant_method")
        method = str(method) if method is not None else None
        record = FORMATS.get(method or "")
        keys = (
            record.fields if record else tuple(k for k, v in q.items() if k != "quant_method" and _scalar(v))
        )
        return StoredQuantisation(method, {k: q[k] for k in keys if k in q and q[k] is not None}, where)
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) or (
        isinstance(value, list) and all(isinstance(v, str | int | float) for v in value)
    )


def _value(value: Any) -> str:
    """A field as one short phrase: a dict by its size (config_groups), a long list cut after 4."""
    if isinstance(value, dict):
        return f"{{{len(value)} entr{'y' if len(value) == 1 else 'ies'}}}"
    if isinstance(value, list) and len(value) > 4:
        return json.dumps(value[:4])[:-1] + f", ... {len(value)} in all]"
    return value if isinstance(value, str) else json.dumps(value)
