"""Model shapes from Hugging Face configs: `from_config(path | dict | PretrainedConfig)`.

The config is resolved through transformers' own config class for its model_type, so defaults
(layer_types patterns, Gemma 4's per-layer head_dim, KV-sharing modes) are exactly what the modeling
code will use. A nested `text_config` (multimodal wrappers) is used when present.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuneproof.arch.families import READERS, SUPPORTED_MODEL_TYPES
from tuneproof.arch.shape import Attention, AttentionSpec, Join, LayerShape, Linear, ModelShape, Step
from tuneproof.errors import TuneproofError

__all__ = [
    "SUPPORTED_MODEL_TYPES",
    "Attention",
    "AttentionSpec",
    "Join",
    "LayerShape",
    "Linear",
    "ModelShape",
    "Step",
    "from_config",
    "load_config_dict",
    "resolve_text_config",
    "tiny_config_path",
]

_FIX = "pass a Hugging Face config.json"


def tiny_config_path() -> Path:
    """The embedded default: a tiny Gemma-4-style MoE text config shipped with the package."""
    return Path(__file__).resolve().parent.parent / "configs" / "tiny_gemma4.json"


def load_config_dict(path: str | Path) -> dict[str, Any]:
    """Read a config.json (or a folder holding one) into a dict, with one-line errors."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise TuneproofError(f"config not found: {p}", _FIX)
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TuneproofError(f"config {p} is not valid JSON: {e}", _FIX) from None
    if not isinstance(data, dict):
        raise TuneproofError(f"config {p} is not a JSON object", _FIX)
    return data


def resolve_text_config(config: str | Path | dict[str, Any] | Any) -> Any:
    """A transformers config object for the text model (defaults resolved by its config class)."""
    if isinstance(config, str | Path):
        config = load_config_dict(config)
    if isinstance(config, dict):
        model_type = config.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise _unsupported(model_type)
        from transformers import AutoConfig

        fields = {k: v for k, v in config.items() if k != "model_type"}
        try:
            config = AutoConfig.for_model(model_type, **fields)
        except (ValueError, TypeError, KeyError) as e:
            raise TuneproofError(f"invalid {model_type} config: {e}", "fix the named field") from None
    get_text = getattr(config, "get_text_config", None)
    text = get_text() if callable(get_text) else config
    if getattr(text, "model_type", None) not in READERS:
        raise _unsupported(getattr(text, "model_type", None))
    return text


def _unsupported(model_type: object) -> TuneproofError:
    return TuneproofError(
        f"unsupported model_type {model_type!r}",
        "supported: " + ", ".join(sorted(SUPPORTED_MODEL_TYPES)),
    )


def from_config(config: str | Path | dict[str, Any] | Any) -> ModelShape:
    """A `ModelShape` from a config.json path, a dict, or a transformers config object."""
    text = resolve_text_config(config)
    try:
        return READERS[text.model_type](text, text.model_type)
    except (AttributeError, TypeError, KeyError, ValueError) as e:
        raise TuneproofError(
            f"config for {text.model_type} is missing or has a bad field: {e}", _FIX
        ) from None
