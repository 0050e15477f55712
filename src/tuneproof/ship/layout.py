"""Where a model's parameters live: the module tree built from a config on the meta device (no
weights), the family each parameter belongs to, and the checkpoint keys a model parameter is stored
under.

transformers 5 converts some checkpoints on load: Qwen3-MoE, Qwen2-MoE and Mixtral store one 2-D
matrix per expert and projection (`mlp.experts.3.gate_proj.weight`, Mixtral's
`block_sparse_moe.experts.3.w1.weight`) that the model fuses into 3-D parameters
(`mlp.experts.gate_up_proj`). `save_pretrained` undoes the conversion with
`core_model_loading.revert_weight_conversion`; `checkpoint_pieces` calls that same function, so the
mapping is transformers' own, never a copy of its rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError

# Families of parameters, first match wins (ordered from the most specific name to the broadest).
# A parameter with fewer than 2 dimensions (norms, scales), or a bias of any shape, is "other".
FAMILY_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("head", ("lm_head.",)),
    ("router", (".router.", ".mlp.gate.weight", ".shared_expert_gate.", ".block_sparse_moe.gate.")),
    ("experts", (".experts.",)),
    ("embeddings", ("embed_tokens", "embed_positions", "wte.", "per_layer_model_projection")),
    ("attention", (".self_attn.", ".attention.", ".attn.")),
    ("dense MLP", (".mlp.", ".shared_expert.", ".feed_forward.")),
)
FAMILIES = (*tuple(name for name, _ in FAMILY_RULES), "other")


def family_of(name: str, ndim: int) -> str:
    if ndim < 2 or name.endswith("bias"):
        return "other"
    dotted = "." + name
    for family, needles in FAMILY_RULES:
        if any(n in dotted for n in needles):
            return family
    return "other"


def matrices(name: str, shape: tuple[int, ...]) -> int:
    """How many weight matrices a tensor holds: a 3-D expert tensor holds one per expert, and a fused
    `gate_up_proj` two per expert (gate and up), so that fused and per-expert checkpoints count the
    same: the reference run's 30 layers x 128 experts x 3 projections = 11,520 either way."""
    if len(shape) < 2 or name.endswith("bias"):
        return 0
    if len(shape) == 2:
        return 1
    experts = shape[0]
    return experts * (2 if name.split(".")[-1].startswith("gate_up_proj") else 1)


def read_config(path: Path, what: str = "base") -> dict[str, Any]:
    """config.json of a model folder (or a config file itself, or a hub id's from the local Hugging Face
    cache), as a dict, checked as every command checks configs: supported families fully (sizes
    present, values sane), others for finite, positive sizes; transformers' own config class has the
    last word in `meta_model`."""
    from tuneproof.arch import SUPPORTED_MODEL_TYPES, check_config_values, load_config_dict, resolve
    from tuneproof.arch.locate import hub_id

    if not str(path).strip():
        raise TuneproofError(f"the {what} path is empty", "pass a model folder or its config.json")
    if not Path(path).exists() and hub_id(path) is None:  # a hub id is read from the local cache
        raise TuneproofError(f"{what} {path} does not exist", "pass a model folder or its config.json")
    data = load_config_dict(path)
    if not isinstance(data.get("model_type"), str):
        raise TuneproofError(f"{what} config {path} has no model_type", "pass a transformers config.json")
    if data["model_type"] in SUPPORTED_MODEL_TYPES:
        resolve(data)  # refuses a config whose sizes would all be transformers' defaults, or bad values
    else:
        check_config_values(data, f"{what} config {path}")
    return data


def meta_model(config: dict[str, Any]) -> Any:
    """The causal LM a config describes, on the meta device: its module tree and shapes, no memory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in config.items() if k != "model_type"}
    try:
        cfg = AutoConfig.for_model(config["model_type"], **fields)
        with torch.device("meta"):
            return AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # the config class's own validation (huggingface_hub strict dataclasses too)
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise TuneproofError(
            f"transformers cannot build a {config.get('model_type')!r} causal LM from this config: "
            f"{first[:200]}{' ...' if len(first) > 200 else ''}",
            "pass the config.json of a causal language model transformers knows",
        ) from None


@dataclass(kw_only=True, frozen=True, slots=True)
class ParamInfo:
    name: str
    shape: tuple[int, ...]
    family: str
    numel: int
    matrices: int


def parameters(model: Any) -> list[ParamInfo]:
    """Every parameter of a (meta) model, tied ones once, with its family."""
    seen: set[int] = set()
    out = []
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in seen:
            continue
        seen.add(id(p))
        shape = tuple(p.shape)
        out.append(
            ParamInfo(
                name=name,
                shape=shape,
                family=family_of(name, len(shape)),
                numel=p.numel(),
                matrices=matrices(name, shape),
            )
        )
    return out


def checkpoint_pieces(model: Any, name: str, tensor: Any, stored: set[str]) -> dict[str, Any]:
    """`tensor` (shaped like model parameter `name`) as the checkpoint stores it: {key: piece}.
    A key already stored as-is wins; otherwise transformers' reverse conversion decides. `tensor`
    None asks only for the keys and shapes (meta pieces, no memory)."""
    if tensor is None:
        import torch

        tensor = torch.empty(model.get_parameter(name).shape, device="meta")
    if name in stored:
        return {name: tensor}
    from transformers.core_model_loading import revert_weight_conversion

    pieces = revert_weight_conversion(model, {name: tensor})
    return {k: v[0] if isinstance(v, list) else v for k, v in pieces.items()}
