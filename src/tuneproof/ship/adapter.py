"""A PEFT LoRA adapter folder read without PEFT's loader: its config, its tensors, and for each adapted
module the rank, the scaling and the model parameter it changes.

Key names follow PEFT's `get_peft_model_state_dict` (adapter name stripped):
`<module>.lora_A.weight` / `lora_B.weight`, embeddings `<module>.lora_embedding_A` / `_B`, DoRA's
`lora_magnitude_vector`, and the base layer's own copy `<module>.base_layer.weight` PEFT saves next to
an embedding LoRA. With a base config the structure comes from PEFT itself (the model built on the
meta device and wrapped by `get_peft_model`), which is the only way to tell nested fused-expert
wrappers apart (references/gate-and-serving.md section 4.3); without one it is read from the key
names and `adapter_config.json`, and says so.

Shapes: linear A (r, in), B (out, r); embedding A (r, vocab), B (dim, r); fused experts
(`target_parameters`, PEFT's `ParamWrapper`) A (r*E, in) read as (E, r, in), B (out, r*E) read as
(out, r, E): expert e owns B's columns j with j % E == e, not a contiguous block.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.arch.targets import pattern_value, peft_matches
from tuneproof.core.dtypes import BY_SHORT, MODEL_DTYPES
from tuneproof.core.errors import TuneproofError
from tuneproof.ship.tensors import Header, TensorInfo, read_header

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PICKLE_NAME = "adapter_model.bin"
PREFIX = "base_model.model."
# init_lora_weights values that start B at zero (A for embeddings), so "still zero" means "never
# trained" (peft/tuners/lora/layer.py `reset_lora_parameters`); every other init (pissa*, corda*,
# olora, loftq, orthogonal, lora_ga, False) starts B non-zero.
ZERO_B_INITS = (True, "gaussian", "eva")

_KEY = re.compile(
    r"^(?P<path>.+?)\.(?:(?P<ab>lora_A|lora_B)\.weight|(?P<emb>lora_embedding_A|lora_embedding_B)"
    r"|(?P<dora>lora_magnitude_vector)(?:\.weight)?|(?P<bias>lora_B\.bias)|(?P<copy>base_layer\.weight))$"
)

MODEL_SAFETENSORS = {BY_SHORT[d].safetensors for d in MODEL_DTYPES}  # what LoRA factors are stored in


@dataclass(kw_only=True, frozen=True, slots=True)
class Module:
    """One adapted module: `path` is its key prefix in the adapter file."""

    path: str
    kind: str  # "linear" | "embedding" | "experts"
    a: TensorInfo
    b: TensorInfo
    rank: int
    scaling: float
    target: str | None  # the model parameter it changes; None when unknown without a base config
    num_experts: int = 1
    experts_out_first: bool = True  # experts: delta laid out (E, out, in); False: (E, in, out)
    fan_in_fan_out: bool = False
    # PEFT's merge casts the delta to the weight's dtype before adding it (lora.Embedding.merge,
    # ParamWrapper.get_delta_weight); lora.Linear adds the fp32 delta and rounds the sum once
    rounds_delta: bool = False


@dataclass(kw_only=True, slots=True)
class Adapter:
    folder: Path
    config: dict[str, Any]
    header: Header
    modules: list[Module]
    stored_copies: dict[str, TensorInfo] = field(default_factory=dict)  # target param -> adapter's copy
    dora: bool = False
    lora_bias: bool = False
    unknown_keys: list[str] = field(default_factory=list)  # modules_to_save, trainable tokens, ...
    resolved_with_base: bool = False

    @property
    def init(self) -> Any:
        return self.config.get("init_lora_weights", True)

    @property
    def zero_b_init(self) -> bool:
        return self.init in ZERO_B_INITS

    @property
    def target_parameters(self) -> list[str]:
        return list(self.config.get("target_parameters") or [])


def _strip(path: str) -> str:
    """The model's own module path: no PEFT prefix, no nested `.base_layer`."""
    path = path.removeprefix(PREFIX)
    return ".".join(p for p in path.split(".") if p != "base_layer")


def read_adapter_config(folder: Path) -> dict[str, Any]:
    folder = Path(folder)
    if not folder.is_dir():
        raise TuneproofError(f"adapter {folder} is not a folder", "pass the folder save_pretrained wrote")
    path = folder / CONFIG_NAME
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise TuneproofError(f"{folder} has no {CONFIG_NAME}", "pass a PEFT adapter folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TuneproofError(
            f"cannot read {path}: {getattr(e, 'strerror', None) or 'not JSON'}", "pass a valid PEFT adapter"
        ) from None
    if not isinstance(config, dict):
        raise TuneproofError(f"{path} is not a JSON object", "pass a valid PEFT adapter")
    kind = config.get("peft_type")
    if kind != "LORA":
        raise TuneproofError(f"{path} describes a {kind!r} adapter, not LoRA", "pass a LoRA adapter")
    _positive(path, "r", config.get("r"), integer=True)
    _positive(path, "lora_alpha", config.get("lora_alpha"), integer=False)
    for key, integer in (("rank_pattern", True), ("alpha_pattern", False)):
        patterns = config.get(key) or {}
        if not isinstance(patterns, dict):
            raise TuneproofError(f"{path}: {key} is {patterns!r}, not a mapping", "fix the adapter config")
        for name, value in patterns.items():
            _positive(path, f"{key}[{name!r}]", value, integer=integer)
            try:
                re.compile(name)
            except re.error as e:
                raise TuneproofError(
                    f"{path}: {key} key {name!r} is not a regex: {e}", "fix the adapter config"
                ) from None
    if not (config.get("target_modules") or config.get("target_parameters")):
        raise TuneproofError(
            f"{path} names no target_modules and no target_parameters",
            "pass the adapter_config.json PEFT wrote",
        )
    return config


def _positive(path: Path, key: str, value: Any, integer: bool) -> None:
    kinds = int if integer else int | float
    ok = not isinstance(value, bool) and isinstance(value, kinds) and math.isfinite(value) and value > 0
    if not ok:
        what = "a positive integer" if integer else "a positive number"
        raise TuneproofError(f"{path}: {key} is {value!r}", f"{key} must be {what}")


def read_adapter(folder: Path, base_config: dict[str, Any] | None = None) -> Adapter:
    """The adapter in `folder`; with `base_config` (a config.json dict) each module is resolved by
    PEFT against the model that config builds, and shapes that do not fit it are refused."""
    folder = Path(folder)
    config = read_adapter_config(folder)
    weights = folder / WEIGHTS_NAME
    if not weights.is_file():
        if (folder / PICKLE_NAME).is_file():
            raise TuneproofError(
                f"{folder} holds only {PICKLE_NAME}, a pickle file that can run code when loaded",
                "re-save the adapter with save_pretrained(..., safe_serialization=True)",
            )
        raise TuneproofError(f"{folder} has no {WEIGHTS_NAME}", "pass the folder save_pretrained wrote")
    header = read_header(weights)
    adapter = _from_keys(folder, config, header)
    if base_config is not None:
        _resolve_with_peft(adapter, base_config)
    if not adapter.modules:
        raise TuneproofError(
            f"{weights} holds no LoRA weights (no lora_A / lora_B keys)", "pass a LoRA adapter"
        )
    return adapter


def _from_keys(folder: Path, config: dict[str, Any], header: Header) -> Adapter:
    parts: dict[str, dict[str, TensorInfo]] = {}
    adapter = Adapter(
        folder=folder, config=config, header=header, modules=[], dora=bool(config.get("use_dora"))
    )
    for name, info in header.tensors.items():
        m = _KEY.match(name)
        if m is None:
            adapter.unknown_keys.append(name)
            continue
        path = m.group("path")
        if m.group("ab") or m.group("emb"):
            parts.setdefault(path, {})[m.group("ab") or m.group("emb")] = info
        elif m.group("dora"):
            adapter.dora = True
        elif m.group("bias"):
            adapter.lora_bias = True
        else:
            adapter.stored_copies[_strip(path) + ".weight"] = info
    params = {p.rsplit(".", 1)[0] for p in adapter.target_parameters}
    for path, ab in sorted(parts.items()):
        if len(ab) != 2:
            raise TuneproofError(
                f"{header.path}: {path} has {', '.join(sorted(ab))} without its partner",
                "re-save the adapter",
            )
        if "lora_A" in ab:
            a, b, kind = ab["lora_A"], ab["lora_B"], "linear"
        else:
            a, b, kind = ab["lora_embedding_A"], ab["lora_embedding_B"], "embedding"
        for t in (a, b):
            if len(t.shape) != 2 or t.dtype not in MODEL_SAFETENSORS:
                raise TuneproofError(
                    f"{header.path}: {t.name} is {t.dtype} {list(t.shape)}, not a float matrix "
                    "(a 1-D or empty factor is what DeepSpeed ZeRO-3 / FSDP save when shards were not "
                    "gathered)",
                    "re-save the adapter with the full parameters gathered",
                )
        stripped = _strip(path)
        if kind == "linear" and peft_matches(stripped, params):
            kind = "experts"
        rank, alpha = _rank_alpha(config, stripped)
        if kind == "experts":
            experts = a.shape[0] // rank if rank and a.shape[0] % rank == 0 else 0
            if experts < 1 or b.shape[1] != a.shape[0]:
                raise TuneproofError(
                    f"{header.path}: {path} has A {list(a.shape)} and B {list(b.shape)}, which do not split "
                    f"into experts of rank {rank}",
                    "pass the base ({base}) so the experts are resolved against the model",
                    fields=("base",),
                )
            module = Module(
                path=path, kind=kind, a=a, b=b, rank=rank, scaling=_scaling(config, rank, alpha), target=None,
                num_experts=experts, rounds_delta=True,
            )  # fmt: skip
        else:
            rank = a.shape[0]
            if b.shape[1] != rank:
                raise TuneproofError(
                    f"{header.path}: {path} has A {list(a.shape)} and B {list(b.shape)}: their ranks differ",
                    "re-save the adapter",
                )
            target = stripped + ".weight"
            module = Module(
                path=path, kind=kind, a=a, b=b, rank=rank, scaling=_scaling(config, rank, alpha),
                target=target, fan_in_fan_out=bool(config.get("fan_in_fan_out")) and kind == "linear",
                rounds_delta=kind == "embedding",
            )  # fmt: skip
        adapter.modules.append(module)
    return adapter


def _rank_alpha(config: dict[str, Any], module: str) -> tuple[int, float]:
    """r and alpha for a module, with rank_pattern / alpha_pattern matched as PEFT's
    `get_pattern_key` does (`(.*\\.)?(key)$`, first key in order wins)."""

    rank = pattern_value(module, (config.get("rank_pattern") or {}).items(), config["r"])
    alpha = pattern_value(module, (config.get("alpha_pattern") or {}).items(), config["lora_alpha"])
    return int(rank), float(alpha)


def _scaling(config: dict[str, Any], rank: int, alpha: float) -> float:
    """PEFT's `LoraLayer.update_layer`: alpha / sqrt(r) with use_rslora, else alpha / r."""
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def _resolve_with_peft(adapter: Adapter, base_config: dict[str, Any]) -> None:
    """Re-derive every module from PEFT wrapping the base on the meta device: the parameter each
    wrapper targets, its scaling, expert count and layout; refuse shapes that do not fit."""
    import warnings

    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    from tuneproof.ship.layout import meta_model

    model = meta_model(base_config)
    known = set(LoraConfig.__dataclass_fields__)
    fields = {k: v for k, v in adapter.config.items() if k in known}
    fields.update(init_lora_weights=True, inference_mode=True)  # structure only: no init work on meta
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peft_model = get_peft_model(model, LoraConfig(**fields))
    except (ValueError, TypeError, KeyError, RuntimeError) as e:
        raise TuneproofError(
            f"PEFT cannot apply this adapter's config to the base: {str(e).splitlines()[0]}",
            "pass the base the adapter was trained on",
        ) from None
    by_path = {m.path: m for m in adapter.modules}
    resolved: list[Module] = []
    for name, layer in peft_model.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        adapter_name = next(iter(layer.scaling), None)
        if adapter_name is None:
            continue
        mine = by_path.pop(name, None)
        if mine is None:
            raise TuneproofError(
                f"the adapter has no weights for {name}, which its config targets in this base",
                "pass the base the adapter was trained on",
            )
        resolved.append(_resolved(name, layer, adapter_name, mine))
    if by_path:
        extra = sorted(by_path)
        raise TuneproofError(
            f"the adapter does not fit this base: {len(extra)} adapted modules are not in it ({extra[0]})",
            "pass the base the adapter was trained on",
        )
    adapter.modules = resolved
    adapter.resolved_with_base = True


def _resolved(name: str, layer: Any, adapter_name: str, mine: Module) -> Module:
    """The module PEFT's wrapper `layer` (at `name`) makes of the adapter's tensors `mine`: its target
    parameter, scaling, expert count and layout; shapes that do not fit the wrapper are refused."""
    from peft.tuners.lora import ParamWrapper

    if adapter_name in layer.lora_A:
        want_a, want_b = layer.lora_A[adapter_name].weight.shape, layer.lora_B[adapter_name].weight.shape
    else:
        want_a, want_b = (
            layer.lora_embedding_A[adapter_name].shape,
            layer.lora_embedding_B[adapter_name].shape,
        )
    for t, want in ((mine.a, tuple(want_a)), (mine.b, tuple(want_b))):
        if tuple(t.shape) != want:
            raise TuneproofError(
                f"the adapter does not fit this base: {t.name} is {list(t.shape)}, the base "
                f"needs {list(want)}",
                "pass the base the adapter was trained on",
            )
    scaling = float(layer.scaling[adapter_name])
    stripped = _strip(name)
    if isinstance(layer, ParamWrapper) and layer.num_experts > 1:
        return Module(
            path=name, kind="experts", a=mine.a, b=mine.b, rank=int(layer.r[adapter_name]), scaling=scaling,
            target=f"{stripped}.{layer.parameter_name}", num_experts=int(layer.num_experts),
            experts_out_first=bool(layer._did_swap_in_out_features), rounds_delta=True,
        )  # fmt: skip
    target = f"{stripped}.{layer.parameter_name}" if isinstance(layer, ParamWrapper) else f"{stripped}.weight"
    return Module(
        path=name, kind=mine.kind if mine.kind == "embedding" else "linear", a=mine.a, b=mine.b,
        rank=int(layer.r[adapter_name]), scaling=scaling, target=target,
        fan_in_fan_out=bool(getattr(layer, "fan_in_fan_out", False)),
        rounds_delta=mine.kind == "embedding" or isinstance(layer, ParamWrapper),
    )  # fmt: skip


def delta(module: Module, a: Any, b: Any) -> Any:
    """scaling * B @ A in fp32, shaped like the parameter it changes (PEFT's `get_delta_weight`)."""
    import torch

    a, b = a.float(), b.float()
    if module.kind == "experts":
        e = module.num_experts
        a_eri = a.reshape(e, -1, a.shape[-1])
        b_ore = b.reshape(b.shape[0], -1, e)
        layout = "o r e, e r i -> e o i" if module.experts_out_first else "o r e, e r i -> e i o"
        return torch.einsum(layout, b_ore, a_eri).mul_(module.scaling)
    d = (b @ a).mul_(module.scaling)
    return d.T if module.kind == "embedding" or module.fan_in_fan_out else d
