"""The modules of the model a trainer loads (AutoModelForCausalLM of the published config, vision and
audio towers included): every nn.Linear with its shape, the routed experts' fused 3-D parameters and
the parameter count, from the model built on the meta device and cached per config beside the shape
cache (`tuneproof.arch.cache`)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Inventory:
    linears: tuple[tuple[str, int, int], ...]  # (full name, in_features, out_features)
    experts: tuple[tuple[str, int], ...]  # 3-D parameters (routed experts): (full name, numel)
    total_params: int


def inventory(config: dict[str, Any]) -> Inventory:
    """The model's nn.Linear modules and 3-D parameters, from the cache or a meta-device build."""
    from tuneproof.arch import cache

    key = cache.key_for(config)
    path = cache.entry_path(key).with_name(f"modules-{key[:32]}.json") if key else None
    if path is not None and path.is_file():
        try:
            raw = json.loads(path.read_text())
            return Inventory(
                tuple(map(tuple, raw["linears"])), tuple(map(tuple, raw["experts"])), raw["total"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged entry is a miss
    inv = _build(config)
    if path is not None:
        from tuneproof.core.io import atomic_write_bytes

        body = {"linears": inv.linears, "experts": inv.experts, "total": inv.total_params}
        with contextlib.suppress(Exception):  # an unwritable cache costs the next run its speed only
            atomic_write_bytes(path, json.dumps(body).encode())
    return inv


def _build(config: dict[str, Any]) -> Inventory:
    import torch
    from transformers import AutoConfig

    from tuneproof.arch.construct import meta_model

    data = {k: v for k, v in config.items() if k != "quantization_config"}  # the layout, not the storage
    cfg = AutoConfig.for_model(**data)
    model = meta_model(cfg)
    linears = tuple(
        (name, int(m.in_features), int(m.out_features))
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
    )
    experts = tuple(
        (name, int(p.numel())) for name, p in model.named_parameters() if p.dim() == 3 and "expert" in name
    )  # routed experts' fused weights (a conv1d's 3-D weight is no expert)
    total = sum(int(p.numel()) for p in model.parameters())
    return Inventory(linears, experts, total)
