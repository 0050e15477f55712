"""What a merge will do, decided before any weight is read: every refusal, and where each adapted
module's delta goes in the base checkpoint.

Refused: an existing `out` (or one inside an input, or in a folder that cannot be written), a
quantised base, DoRA, `lora_bias`, adapters carrying whole modules (`modules_to_save`, trainable
tokens) or a copy of a base layer that differs from the base, inits that rewrite the base when PEFT
loads them, `layer_replication`, a LoRA on a head tied to the embedding, and shapes that do not fit.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.arch.quantization import stored_quantisation
from tuneproof.core.dtypes import BY_SHORT, MODEL_DTYPES
from tuneproof.core.errors import TuneproofError
from tuneproof.ship.adapter import Adapter, Module, read_adapter
from tuneproof.ship.layout import checkpoint_pieces, meta_model, read_config
from tuneproof.ship.tensors import FLOAT_DTYPES, Checkpoint, open_checkpoint, read_tensor

MERGE_DTYPES = {s: BY_SHORT[s].safetensors for s in MODEL_DTYPES}  # what --dtype takes
# Inits whose adapter only makes sense on a base PEFT rewrites at load time (peft_model.py
# `save_pretrained(path_initial_model_for_weight_conversion=...)` converts them into plain LoRA).
BASE_MUTATING_INITS = ("pissa", "olora", "corda", "loftq", "lora_ga")


@dataclass(kw_only=True, slots=True)
class MergePlan:
    base: Checkpoint
    adapter: Adapter
    model: Any
    out: Path
    dtype: str | None  # safetensors dtype for every float tensor; None: each keeps its own
    targets: dict[str, tuple[Module, str]] = field(default_factory=dict)  # checkpoint key -> (module, param)
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # warnings the caller should show
    allow_base_mismatch: bool = False  # merge onto a base that differs from the recorded one (loudly)
    seconds: float = 0.0  # how long planning took (imports included when they were first)
    import_seconds: float = 0.0  # of which importing torch, transformers and PEFT (0 when already loaded)


def check_out(out: Path, inputs: list[Path]) -> None:
    out = Path(out)
    if out.exists() or out.is_symlink():
        raise TuneproofError(
            f"{out} already exists", "pass a new folder for the merged model; nothing is overwritten"
        )
    parent = out.parent
    if not parent.exists():
        raise TuneproofError(
            f"{parent} does not exist", "create the parent folder first or pass another output"
        )
    if not parent.is_dir():
        raise TuneproofError(f"{parent} is not a folder", "pass an output path inside a folder")
    resolved = out.resolve()
    for folder in inputs:
        inside = Path(folder).resolve()
        if resolved == inside or inside in resolved.parents:
            raise TuneproofError(
                f"{out} is inside the input {folder}", "write the merged model outside the inputs"
            )
    try:  # a real probe: os.access says yes to root on read-only mounts and in /proc
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}.probe-", dir=parent))
    except OSError as e:
        raise TuneproofError(
            f"cannot create a folder in {parent}: {e.strerror}", "pass an output folder you can write"
        ) from None


def stale_partials(out: Path) -> list[Path]:
    """Temporary folders a killed merge into `out` left beside it (a SIGKILL gives no chance to clean up)."""
    out = Path(out)
    return sorted(out.parent.glob(f".{out.name}.partial-*")) if out.parent.is_dir() else []


def plan(
    base: Path, adapter_dir: Path, out: Path, dtype: str | None = None, allow_base_mismatch: bool = False
) -> MergePlan:
    """Everything checked that can be checked without reading the weights."""
    for what, path in (("base", base), ("adapter", adapter_dir), ("output", out)):
        if not str(path).strip():
            raise TuneproofError(f"the {what} path is empty", f"pass the {what} folder")
    check_out(out, [base, adapter_dir])
    if not Path(base).is_dir():  # a merge reads the base's own folder: never a hub id, never a lone config
        raise TuneproofError(
            f"the base {base} is not a folder"
            if Path(base).exists()
            else f"the base folder {base} does not exist",
            "pass the folder holding the base's safetensors and config.json",
        )
    if dtype is not None and dtype not in MERGE_DTYPES:
        raise TuneproofError(
            f"{{dtype}} {dtype!r} is not one of {', '.join(MERGE_DTYPES)}", fields=("dtype",)
        )
    t = time.perf_counter()
    import peft  # noqa: F401  (torch and transformers with it: timed apart from the checks that need them)

    imported = time.perf_counter() - t
    config = read_config(base)
    declared = stored_quantisation(config)
    if declared is not None:
        raise TuneproofError(
            f"the base is quantised ({declared.method or '?'}): merging into quantised weights rounds the "
            "adapter away",
            "merge onto the unquantised base, then quantise the merged model",
        )
    checkpoint = open_checkpoint(base, "base")
    adapter = read_adapter(adapter_dir, config)
    _refuse_variants(adapter)
    model = meta_model(config)
    result = MergePlan(
        base=checkpoint, adapter=adapter, model=model, out=Path(out),
        dtype=MERGE_DTYPES[dtype] if dtype else None, config=config, allow_base_mismatch=allow_base_mismatch,
        import_seconds=imported,
    )  # fmt: skip
    stored = set(checkpoint.tensors)
    for module in adapter.modules:
        assert module.target is not None  # resolved with the base config
        for key, piece in checkpoint_pieces(model, module.target, None, stored).items():
            info = checkpoint.tensors.get(key)
            if info is None and module.target == "lm_head.weight" and _tied(config):
                raise TuneproofError(
                    "the adapter changes lm_head, which this base ties to embed_tokens "
                    "(tie_word_embeddings): the checkpoint stores one tensor for both, so merging would "
                    "change the input embedding too",
                    "merge it with PEFT into an untied copy, or train without a LoRA on the tied head",
                )
            if info is None:
                raise TuneproofError(
                    f"the base checkpoint has no {key}, which {module.path} changes",
                    "pass the base the adapter was trained on",
                )
            if tuple(piece.shape) != info.shape:
                raise TuneproofError(
                    f"the adapter does not fit the base: {key} is {list(info.shape)} in the checkpoint, "
                    f"the adapter changes {list(piece.shape)}",
                    "pass the base the adapter was trained on",
                )
            if info.dtype not in FLOAT_DTYPES:
                raise TuneproofError(
                    f"{key} is stored as {info.dtype} in the base: a quantised or packed tensor "
                    "cannot take a merge",
                    "merge onto the unquantised base",
                )
            if key in result.targets:
                raise TuneproofError(
                    f"two adapted modules change {key}", "pass an adapter with one LoRA per weight"
                )
            result.targets[key] = (module, module.target)
    _check_stored_copies(adapter, checkpoint, model)
    result.notes = [*_stale_notes(Path(out)), *_health_notes(adapter_dir), *_tied_notes(adapter, model)]
    return result


def _stale_notes(out: Path) -> list[str]:
    return [
        f"{stale} is left from an interrupted merge into {out}; remove it to free its space"
        for stale in stale_partials(out)
    ]


def _health_notes(adapter_dir: Path) -> list[str]:
    """An adapter that never trained (all of lora_B zero somewhere) merges to the base's weights there:
    said before the merge, not found after shipping it (`tuneproof lora check` gives the detail)."""
    from tuneproof.core.verdict import FINDING
    from tuneproof.ship.health import check_adapter

    verdict = check_adapter(adapter_dir).verdict
    if verdict.exit_code != FINDING:
        return []
    return [
        f"the adapter is {verdict}: merged as it is, where lora_B is zero the merged weights are the "
        f"base's (see 'tuneproof lora check {adapter_dir}')"
    ]


def _tied_notes(adapter: Adapter, model: Any) -> list[str]:
    """A LoRA on a tied embedding changes the output head too once merged (one tensor holds both)."""
    tied = model.get_output_embeddings() is not None and (
        model.get_output_embeddings().weight is model.get_input_embeddings().weight
    )
    if not tied:
        return []
    return [
        f"{m.target} is tied to the output head (tie_word_embeddings): the merged tensor changes the head "
        "too, which the adapter never trained through (PEFT's merge does the same)"
        for m in adapter.modules
        if m.kind == "embedding"
    ]


def _tied(config: dict[str, Any]) -> bool:
    text = config.get("text_config")
    inner = text.get("tie_word_embeddings", True) if isinstance(text, dict) else True
    return bool(config.get("tie_word_embeddings", inner))


def _refuse_variants(adapter: Adapter) -> None:
    config = adapter.config
    if adapter.dora:
        raise TuneproofError(
            "the adapter uses DoRA, whose merge rescales each column by a magnitude vector",
            "merge it with PEFT",
        )
    if adapter.lora_bias or config.get("lora_bias"):
        raise TuneproofError(
            "the adapter trains a LoRA bias (lora_bias), which this merge does not add", "merge it with PEFT"
        )
    if config.get("modules_to_save") or config.get("trainable_token_indices") or adapter.unknown_keys:
        what = (
            adapter.unknown_keys[0] if adapter.unknown_keys else "modules_to_save / trainable_token_indices"
        )
        raise TuneproofError(
            f"the adapter carries whole trained modules or tokens ({what}), which a LoRA merge would drop",
            "merge it with PEFT's merge_and_unload",
        )
    init = config.get("init_lora_weights", True)
    if isinstance(init, str) and init.startswith(BASE_MUTATING_INITS):
        raise TuneproofError(
            f"the adapter was initialised with init_lora_weights={init!r}, which changes the base weights "
            "when PEFT loads it (W - scaling * B0 @ A0): adding B @ A to the original base would be wrong",
            "convert it first with PEFT: save_pretrained(..., path_initial_model_for_weight_conversion=...)",
        )
    if config.get("layer_replication"):
        raise TuneproofError(
            "the adapter uses layer_replication, which changes the model's layers", "merge it with PEFT"
        )


def _check_stored_copies(adapter: Adapter, base: Checkpoint, model: Any) -> None:
    """PEFT saves the base embedding next to an embedding LoRA and loads it back over the base; the
    merge is only right when that copy equals the base's own tensor."""
    if not adapter.stored_copies:
        return
    with adapter.header.path.open("rb") as f:
        for target, info in adapter.stored_copies.items():
            key = next(iter(checkpoint_pieces(model, target, None, set(base.tensors))))
            mine = base.tensors.get(key)
            if mine is None or mine.shape != info.shape:
                raise TuneproofError(
                    f"the adapter carries its own {target} of shape {list(info.shape)}, the base's differs "
                    "(a resized vocabulary?)",
                    "merge it with PEFT, which loads the adapter's copy",
                )
            with base.shard_of()[key].path.open("rb") as g:
                same = read_tensor(info, f).to(_torch_dtype(mine.dtype)).equal(read_tensor(mine, g))
            if not same:
                raise TuneproofError(
                    f"the adapter carries its own {target}, which differs from the base's",
                    "merge it with PEFT, which loads the adapter's copy over the base",
                )


def _torch_dtype(st_dtype: str) -> Any:
    import torch

    from tuneproof.ship.tensors import TORCH_DTYPES

    return getattr(torch, TORCH_DTYPES[st_dtype])
