"""Model shapes from Hugging Face configs.

One front door, `resolve(config)`, takes what a user can point at: "tiny" (the embedded model), a
config.json path or its folder, a hub id such as `meta-llama/Llama-3.2-1B` (read from the local Hugging
Face cache, `tuneproof.arch.locate`), a dict, a transformers `PretrainedConfig`, or an already
resolved model. The config is read through transformers' own config class for its model_type, so defaults
(layer_types patterns, Gemma 4's per-layer head_dim, KV-sharing modes) are exactly what the modeling
code will use; a nested `text_config` (multimodal wrappers) is used when present. Every size field is
checked on the way in, and fields taken from transformers' defaults are named in `notes`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.arch import cache
from tuneproof.arch.coverage import refusal
from tuneproof.arch.families import FAMILIES, SUPPORTED_MODEL_TYPES, Family, family_of
from tuneproof.arch.locate import locate_config
from tuneproof.arch.shape import Attention, AttentionSpec, Join, LayerShape, Linear, ModelShape, Op
from tuneproof.arch.values import check_values as _check_values
from tuneproof.arch.values import config_fields
from tuneproof.core.errors import TuneproofError

__all__ = [
    "FAMILIES",
    "SUPPORTED_MODEL_TYPES",
    "TINY",
    "Attention",
    "AttentionSpec",
    "Family",
    "Join",
    "LayerShape",
    "Linear",
    "ModelShape",
    "Op",
    "ResolvedModel",
    "from_config",
    "load_config_dict",
    "resolve",
    "resolve_text_config",
    "tiny_config_path",
]

TINY = "tiny"
_FIX = "pass a Hugging Face config.json"
_SCOPE = "tuneproof costs decoder-only text models; docs/families.md lists them"


def tiny_config_path() -> Path:
    """The embedded default: a tiny Gemma-4-style MoE text config shipped with the package."""
    return Path(__file__).resolve().parent.parent / "configs" / "tiny_gemma4.json"


@dataclass(kw_only=True, frozen=True, slots=True)
class ResolvedModel:
    """A model the tools can account for and build: its name, shape and transformers text config.

    `notes` name every size field that came from transformers' defaults rather than the config.
    `max_positions` is the config's max_position_embeddings (None: no limit set). `source` is the
    config dict the model was read from (None for a config object); `config` reads it through
    transformers on first use when the model came from the on-disk cache (`tuneproof.arch.cache`),
    so counting a cached model imports neither transformers nor torch."""

    name: str
    shape: ModelShape
    notes: tuple[str, ...] = ()
    max_positions: int | None = None
    source: dict[str, Any] | None = field(default=None, repr=False)
    _config: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def family(self) -> Family:
        return family_of(self.shape.model_type)

    @property
    def config(self) -> Any:
        """The transformers PretrainedConfig of the text model (read from `source` on first use)."""
        if self._config is None:
            assert self.source is not None, "a ResolvedModel holds a config or the dict to read it from"
            config, _ = _from_dict(self.source, self.name)
            object.__setattr__(self, "_config", _text_of(config))
        return self._config

    @property
    def attention_dropout(self) -> float:
        """The dropout its attention layers pass to SDPA in training (transformers reads the config's
        `attention_dropout` into `self.attention_dropout`); 0.0 where the config has none."""
        value = getattr(self.config, "attention_dropout", 0.0)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0

    def positions_problem(self, tokens: int, what: str) -> str | None:
        """The one rule for widths the model cannot place: `what` (e.g. "seq_len") of `tokens` tokens
        exceeds max_position_embeddings, as a sentence; None when it fits or the config sets no limit.
        A caller that runs the model refuses it (`tuneproof.measure.model.check_positions`); one that only
        counts or explains notes it (context extension is a real use)."""
        limit = self.max_positions
        if limit is None or tokens <= limit:
            return None
        return f"{what} {tokens} exceeds the model's max_position_embeddings {limit}"

    def positions_notes(self, seq_len: int) -> tuple[str, ...]:
        """A width over the model's positions is counted as asked (context extension), with this note."""
        problem = self.positions_problem(seq_len, "seq_len")
        return (f"{problem}: the ledger counts it as asked (context extension?)",) if problem else ()


MAX_CONFIG_BYTES = 16 << 20  # a config.json is kilobytes; a bigger file is something else


def load_config_dict(path: str | Path) -> dict[str, Any]:
    """Read a config.json, a folder holding one, or a hub id's config.json from the local Hugging Face
    cache (`tuneproof.arch.locate`: never downloaded) into a dict, with one-line errors."""
    if not str(path).strip():
        raise TuneproofError("the config path is empty", _FIX)
    p = locate_config(path)
    if not p.exists():
        raise TuneproofError(f"config not found: {p}", _FIX)
    if not p.is_file():
        raise TuneproofError(f"config {p} is not a regular file", _FIX)
    try:
        if p.stat().st_size > MAX_CONFIG_BYTES:
            raise TuneproofError(f"config {p} is over {MAX_CONFIG_BYTES >> 20} MiB: not a config.json", _FIX)
        data = json.loads(p.read_bytes())
    except OSError as e:
        raise TuneproofError(f"config {p} cannot be read: {e.strerror or e}", _FIX) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TuneproofError(f"config {p} is not valid JSON: {e}", _FIX) from None
    except ValueError:  # Python's limit on integer literals (sys.get_int_max_str_digits, 4300 digits)
        raise TuneproofError(f"config {p} holds an integer too long to be a size", _FIX) from None
    except RecursionError:
        raise TuneproofError(f"config {p} is nested too deeply", _FIX) from None
    if not isinstance(data, dict):
        raise TuneproofError(f"config {p} is not a JSON object", _FIX)
    return data


def check_config_values(data: dict[str, Any], where: str) -> None:
    """The value checks every config gets (`tuneproof.arch.values`: finite numbers, positive sizes,
    heads and experts that fit together, sizes a machine can hold), on a config of any family, its
    text_config included."""
    _check_values(data, where)
    text = _text_part(data)
    if text is not data:
        _check_values(text, where + " text_config")


def _text_part(data: dict[str, Any]) -> dict[str, Any]:
    nested = data.get("text_config")
    return nested if isinstance(nested, dict) else data


def _from_dict(data: dict[str, Any], where: str) -> tuple[Any, tuple[str, ...]]:
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or not _known(model_type):
        raise _unsupported(model_type)
    text = _text_part(data)
    _check_values(data, where)
    if text is not data:
        _check_values(text, where + " text_config")
    text_type = text.get("model_type", model_type) if text is not data else model_type
    family = family_of(SUPPORTED_MODEL_TYPES.get(model_type, str(text_type)))
    sizes = family.size_fields or _GENERIC_SIZES
    missing = [f for f in sizes if f not in text and not _aliased(model_type, text_type, f, text)]
    if len(missing) == len(sizes):
        raise TuneproofError(
            f"{where} holds none of {', '.join(sizes)}: every size would come from "
            f"transformers' {family.model_type} defaults, not your model",
            "pass the model's full config.json",
        )
    from transformers import AutoConfig

    fields = {k: v for k, v in data.items() if k != "model_type"}
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except Exception as e:  # the config class's own validation (huggingface_hub's strict dataclasses too)
        first = _validation_message(e)
        raise TuneproofError(
            f"invalid {model_type} config in {where}: {first}", "fix the named field"
        ) from None
    text_config = _text_of(config)
    defaults = {f: _default(text_config, f) for f in missing}
    notes = tuple(  # a field the family leaves None is one it does not use (Falcon: ffn_hidden_size)
        f"{f} not in the config: transformers' default {v!r} is used"
        for f, v in defaults.items()
        if v is not None
    )
    return config, notes


def _validation_message(e: Exception) -> str:
    """One line of a config class's refusal. huggingface_hub's strict dataclasses say "Validation
    error for field 'hidden_size':" on the first line and why on the next ("TypeError: Field
    'hidden_size' expected int, got NoneType"): both are kept, a reason over 300 characters cut in
    its middle (LFM2's layer_types check lists every allowed type before what it got)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    if len(lines) > 1 and lines[0].endswith(":"):
        head, got, tail = lines[1].partition(" but got ")
        reason = lines[1] if len(lines[1]) <= 300 else f"{head[:160]} ...{got}{tail[:120]}"
        return f"{lines[0]} {reason}"
    return lines[0]


def _default(config: Any, field: str) -> Any:
    try:
        return getattr(config, field, None)
    except Exception:  # Gemma 4's per-layer fields raise when read globally
        return None


def _text_of(config: Any) -> Any:
    get_text = getattr(config, "get_text_config", None)
    return get_text() if callable(get_text) else config


def resolve_text_config(config: str | Path | dict[str, Any] | Any) -> Any:
    """A transformers config object for the text model (defaults resolved by its config class)."""
    return resolve(config).config


def resolve(config: str | Path | dict[str, Any] | Any) -> ResolvedModel:
    """The one way in: "tiny", a config.json path (or folder), a hub id in the local Hugging Face
    cache (`owner/name[@revision]`), a dict, a PretrainedConfig, or a ResolvedModel (returned as is)."""
    if isinstance(config, ResolvedModel):
        return config
    notes: tuple[str, ...] = ()
    if isinstance(config, str) and config == TINY:
        name, config = "embedded tiny Gemma-4-style model", load_config_dict(tiny_config_path())
    elif isinstance(config, str | Path):
        name, config = str(config), load_config_dict(config)
    else:
        name = "config object" if not isinstance(config, dict) else "config dict"
    source, key = None, None
    if isinstance(config, dict):
        source, key = copy.deepcopy(config), cache.key_for(config)
        if key is not None and (hit := cache.load(key)) is not None:
            return ResolvedModel(
                name=name, shape=hit.shape, notes=hit.notes, max_positions=hit.max_positions, source=source
            )
        top = config.get("model_type")
        if isinstance(top, str) and top not in FAMILIES and (why := refusal(top)) is not None:
            raise TuneproofError(why, _SCOPE)
        config, notes = _from_dict(config, name)
    elif (why := refusal(str(getattr(config, "model_type", "")))) is not None:
        raise TuneproofError(why, _SCOPE)
    else:  # a config object is checked as a dict is, on the attributes its config class set
        _check_values(config_fields(_text_of(config)), name)
    text = _text_of(config)
    model_type = getattr(text, "model_type", None)
    if not isinstance(model_type, str) or not _known(model_type):
        raise _unsupported(model_type)
    family = family_of(model_type)
    try:
        shape = family.reader(text, family)
    except TuneproofError:
        raise
    except (AttributeError, TypeError, KeyError, ValueError, IndexError, ZeroDivisionError) as e:
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise TuneproofError(
            f"config for {model_type} is missing or has a bad field: {first}", _FIX
        ) from None
    except Exception as e:  # building the module tree on the meta device (a family's own checks)
        first = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise TuneproofError(
            f"transformers cannot build a {model_type} causal LM from this config: {first}", _FIX
        ) from None
    if text is not config:  # a wrapper's text model: its layers sit where the class a trainer loads puts them
        shape = dataclasses.replace(shape, layers_path=_trained_layers_path(config))
    model = ResolvedModel(
        name=name, shape=shape, notes=notes, max_positions=_max_positions(text), source=source
    )
    object.__setattr__(model, "_config", text)
    if key is not None:
        cache.store(key, cache.Entry(shape, notes, model.max_positions))
    return model


def _trained_layers_path(config: Any) -> str:
    """Where the decoder layers of a multimodal wrapper's text model sit in the model a trainer loads
    (AutoModelForCausalLM of the wrapper's config): under `model.language_model` in a
    ...ForConditionalGeneration (Gemma 3 and 4, Mistral 3), at `model.layers` where the auto class maps the
    wrapper to its text model's CausalLM (Llama 4, Qwen 3.5). PEFT matches targets on those paths."""
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING

    loaded = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)
    wrapped = loaded is not None and getattr(loaded, "__name__", "").endswith("ForConditionalGeneration")
    return "model.language_model.layers" if wrapped else "model.layers"


def _max_positions(text: Any) -> int | None:
    value = getattr(text, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


# The sizes a config of a family outside the table must set at least one of (else every size would be
# transformers' default); a config class's attribute_map aliases count (GPT-2's n_embd).
_GENERIC_SIZES = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "intermediate_size",
)


def _known(model_type: str) -> bool:
    """A model_type this transformers can build (the table's families, or any config class it ships)."""
    if model_type in SUPPORTED_MODEL_TYPES:
        return True
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return model_type in CONFIG_MAPPING_NAMES


def _aliased(model_type: str, text_type: object, field: str, text: dict[str, Any]) -> bool:
    """The config sets `field` under another name: its class's attribute_map, or the field the layer
    count is derived from (LongCat-Flash: num_hidden_layers = 2 x num_layers, `LAYER_COUNT_FIELDS`)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from tuneproof.arch.sublayers import LAYER_COUNT_FIELDS

    for t in (str(text_type), model_type):
        if field == "num_hidden_layers" and LAYER_COUNT_FIELDS.get(t) in text:
            return True
        try:
            alias = getattr(CONFIG_MAPPING[t], "attribute_map", {}).get(field)
        except KeyError:
            continue
        if alias in text:
            return True
    return False


def _unsupported(model_type: object) -> TuneproofError:
    import transformers

    if model_type is None:
        return TuneproofError(
            "the config has no model_type",
            "pass the model's own config.json: transformers reads its family from model_type",
        )
    return TuneproofError(
        f"unsupported model_type {model_type!r}: transformers {transformers.__version__} has no config "
        "class for it",
        "pass the config.json of a causal language model transformers knows (docs/families.md)",
    )


def from_config(config: str | Path | dict[str, Any] | Any) -> ModelShape:
    """A `ModelShape` from anything `resolve` takes."""
    return resolve(config).shape
