"""The base a run trains, and its LoRA: the tokenizer (cheap, checked in `prepare`), the weights
(loaded in `run`), and the adapter, applied once.

The LoRA targets are checked in `prepare` on a copy of the model on the meta device (its modules and
their names, no weights): a target that matches nothing is refused before any weights load and
before anything is written. The run then applies the adapter once, to the real weights, after
seeding (lora_A's initialisation draws from the global generator).

Named `base_*` and `attach_lora`, not `load_model` / `apply_lora`: those are the generator's
(`tuneproof.gate.generate`) and the probe's (`tuneproof.measure.model`) and do other things.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.runs.recipe import TINY, Recipe


def base_tokenizer(recipe: Recipe) -> tuple[Any, Path | None]:
    """(tokenizer, the base's folder on disk or None for the tiny model built in memory). A folder
    without config.json or without a tokenizer that loads is refused: nothing is downloaded."""
    if recipe.model.name == TINY:
        from tuneproof.gate.generate import tiny_tokenizer

        tokenizer = tiny_tokenizer()
        tokenizer.padding_side = "right"
        return tokenizer, None
    folder = Path(recipe.model.name)
    if not (folder / "config.json").is_file():
        raise TuneproofError(
            f"model {folder} is not a local model folder (no config.json); nothing is downloaded",
            "pass a folder with config.json, the safetensors and a tokenizer, or 'tiny'",
        )
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError) as e:
        raise TuneproofError(
            f"model {folder} has no tokenizer that loads ({str(e).splitlines()[0][:120]})",
            "add the base's tokenizer files (tokenizer.json, tokenizer_config.json) to the folder",
        ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer, folder


def base_model(recipe: Recipe, attention: str, folder: Path | None, tokenizer: Any) -> Any:
    """The base's weights with `attention`: the tiny model drawn from the recipe's seed, or the
    folder's safetensors; its pad id is the tokenizer's."""
    if folder is None:
        from tuneproof.arch import resolve
        from tuneproof.measure.model import build_model

        model = build_model(resolve(TINY), attention, seed=recipe.optim.seed)
    else:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            folder, attn_implementation=attention, local_files_only=True
        )
    model.config.pad_token_id = tokenizer.pad_token_id
    return model


def load_base(recipe: Recipe, attention: str) -> tuple[Any, Any, Path | None]:
    """(model, tokenizer, base folder on disk or None): `base_tokenizer` and `base_model` in one call."""
    tokenizer, folder = base_tokenizer(recipe)
    return base_model(recipe, attention, folder, tokenizer), tokenizer, folder


def check_lora_targets(recipe: Recipe, folder: Path | None) -> None:
    """`attach_lora` on the base's modules on the meta device (no weights: cheap at any size), so a
    target or target parameter that matches nothing is refused before anything loads."""
    import copy

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if folder is None:
        from tuneproof.arch import resolve

        config = copy.deepcopy(resolve(TINY).config)
    else:
        config = AutoConfig.from_pretrained(folder, local_files_only=True)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    attach_lora(skeleton, recipe)


def attach_lora(model: Any, recipe: Recipe) -> Any:
    """PEFT's get_peft_model with the recipe's LoRA; a target that matches nothing is one line naming
    the candidates (the model's linear modules, or its 3-D fused expert parameters)."""
    import warnings

    import torch
    from peft import LoraConfig, get_peft_model

    lora = recipe.lora
    config = LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, target_modules=lora.targets,  # type: ignore[arg-type]
        target_parameters=lora.target_parameters or None, use_rslora=lora.rslora, lora_dropout=0.0,
    )  # fmt: skip
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapped = get_peft_model(model, config)
    except ValueError as e:
        names = sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        )
        raise TuneproofError(
            f"lora.targets {lora.targets!r} match nothing in the model ({str(e).splitlines()[0][:120]})",
            f"linear modules it has: {', '.join(names)}",
        ) from None
    if lora.target_parameters:
        from peft.tuners.lora import ParamWrapper

        if not any(isinstance(m, ParamWrapper) for m in wrapped.modules()):
            params = sorted({n.split(".", 3)[-1] for n, p in model.named_parameters() if p.dim() == 3})
            raise TuneproofError(
                f"lora.target_parameters {lora.target_parameters!r} match no parameter in the model",
                f"3-D (fused expert) parameters it has: {', '.join(params) or 'none'}",
            )
    return wrapped
