"""Streaming LoRA merge: W + scaling * B @ A written shard by shard, without loading the base as a model.

Every adapted tensor is read alone, merged in fp32 and cast once to the output dtype; every other
tensor is copied as bytes (or cast, when `dtype` asks for one dtype throughout). Peak memory is one
tensor in fp32 plus the delta of one adapted parameter, never a shard, never the model. Output goes to a
temporary folder beside `out` and is renamed into place at the end: a failure leaves nothing.

Refused before any work: an existing `out`, a quantised base, DoRA, `lora_bias`, adapters carrying
whole modules (`modules_to_save`, trainable tokens) or a copy of a base layer that differs from the
base, shapes that do not fit, and (unless `allow_base_mismatch`) a base whose fingerprint differs from
the one recorded next to the adapter.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.dtypes import BY_SHORT, MODEL_DTYPES
from tuneproof.errors import TuneproofError
from tuneproof.io import umask
from tuneproof.ship.adapter import Adapter, Module, delta, read_adapter
from tuneproof.ship.identity import (
    FINGERPRINT_NAME,
    Characterisation,
    Difference,
    Fingerprint,
    characterise,
    compare,
    fingerprint,
    read_fingerprint,
)
from tuneproof.ship.layout import checkpoint_pieces, meta_model, read_config
from tuneproof.ship.tensors import (
    FLOAT_DTYPES,
    INDEX_NAME,
    Checkpoint,
    ShardWriter,
    TensorInfo,
    iter_chunks,
    open_checkpoint,
    read_tensor,
)

DTYPES = {s: BY_SHORT[s].safetensors for s in MODEL_DTYPES}  # what --dtype takes
CONFIG_DTYPE = {d.safetensors: d.config for d in BY_SHORT.values()}
# Inits whose adapter only makes sense on a base PEFT rewrites at load time (peft_model.py
# `save_pretrained(path_initial_model_for_weight_conversion=...)` converts them into plain LoRA).
BASE_MUTATING_INITS = ("pissa", "olora", "corda", "loftq", "lora_ga")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt")
RECORD_NAME = "tuneproof_merge.json"


@dataclass(slots=True)
class Identity:
    """What is known about the base being the one the adapter was trained on."""

    recorded: bool
    same: bool | None  # None: nothing recorded, cannot tell
    difference: Difference | None = None
    characterisation: Characterisation | None = None
    recorded_source: str = ""


@dataclass(slots=True)
class MergePlan:
    base: Checkpoint
    adapter: Adapter
    model: Any
    out: Path
    dtype: str | None  # safetensors dtype for every float tensor; None: each keeps its own
    targets: dict[str, tuple[Module, str]] = field(default_factory=dict)  # checkpoint key -> (module, param)
    config: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # warnings the caller should show


@dataclass(frozen=True, slots=True)
class MergeResult:
    out: Path
    merged_tensors: int
    copied_tensors: int
    modules: int
    bytes_written: int
    identity: Identity
    dtype: str | None = None  # safetensors dtype of every float tensor; None: each kept its own
    warnings: list[str] = field(default_factory=list)

    @property
    def base_identity(self) -> str:
        if self.identity.same:
            return "same as recorded"
        return "DIFFERENT from recorded (allowed)" if self.identity.recorded else "unchecked"

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof merge --json` prints."""
        dtype = next((k for k, v in DTYPES.items() if v == self.dtype), None) if self.dtype else None
        return {
            "out": str(self.out), "modules": self.modules, "merged_tensors": self.merged_tensors,
            "copied_tensors": self.copied_tensors, "bytes_written": self.bytes_written,
            "dtype": dtype or "as stored", "base_identity": self.base_identity, "warnings": self.warnings,
        }  # fmt: skip


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
            f"{parent} is not writable: {e.strerror}", "pass an output folder you can write"
        ) from None


def stale_partials(out: Path) -> list[Path]:
    """Temporary folders a killed merge into `out` left beside it (a SIGKILL gives no chance to clean up)."""
    out = Path(out)
    return sorted(out.parent.glob(f".{out.name}.partial-*")) if out.parent.is_dir() else []


def plan(base: Path, adapter_dir: Path, out: Path, dtype: str | None = None) -> MergePlan:
    """Everything checked that can be checked without reading the weights."""
    for what, path in (("base", base), ("adapter", adapter_dir), ("output", out)):
        if not str(path).strip():
            raise TuneproofError(f"the {what} path is empty", f"pass the {what} folder")
    check_out(out, [base, adapter_dir])
    if dtype is not None and dtype not in DTYPES:
        raise TuneproofError(f"{{dtype}} {dtype!r} is not one of {', '.join(DTYPES)}", fields=("dtype",))
    config = read_config(base)
    quant = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config")
    if quant:
        method = quant.get("quant_method", "?") if isinstance(quant, dict) else "?"
        raise TuneproofError(
            f"the base is quantised ({method}): merging into quantised weights rounds the adapter away",
            "merge onto the unquantised base, then quantise the merged model",
        )
    checkpoint = open_checkpoint(base, "base")
    adapter = read_adapter(adapter_dir, config)
    _refuse_variants(adapter)
    model = meta_model(config)
    result = MergePlan(checkpoint, adapter, model, Path(out), DTYPES[dtype] if dtype else None, config=config)
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
    from tuneproof.ship.health import check_adapter
    from tuneproof.verdict import FINDING

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


def identity(base: Checkpoint, adapter_dir: Path, progress: Callable[[int], None] | None = None) -> Identity:
    """Compare the base with the fingerprint recorded next to the adapter, and characterise any
    difference when the recorded base's folder is still there."""
    recorded_path = Path(adapter_dir) / FINGERPRINT_NAME
    if not recorded_path.is_file():
        return Identity(recorded=False, same=None)
    recorded = read_fingerprint(recorded_path)
    current = fingerprint(base, progress)
    diff = compare(recorded, current)
    ident = Identity(True, diff.identical, diff, recorded_source=recorded.source)
    if not diff.identical and diff.changed:
        source = Path(recorded.source)
        if source.is_dir() and source.resolve() != base.folder.resolve():
            try:
                trained_on = open_checkpoint(source)
            except TuneproofError:
                return ident
            names = diff.comparable
            if set(names) <= set(trained_on.tensors) and _holds(trained_on, recorded, names):
                ident.characterisation = characterise(trained_on, base, names)
    return ident


def judge_identity(ident: Identity, allow_base_mismatch: bool, adapter_dir: Path | None = None) -> list[str]:
    """Refuse a base that is not the recorded one (naming the tensors that differ and what the change
    looks like), or return the warnings to show: the loud one when a mismatch is allowed, and, when
    nothing was recorded beside `adapter_dir`, that the identity cannot be checked."""
    if not ident.recorded:
        where = adapter_dir if adapter_dir is not None else "ADAPTER"
        return [
            f"{where} has no base_fingerprint.json: the base's identity cannot be checked "
            f"(record it at train time: 'tuneproof fingerprint BASE --out FILE', "
            f"FILE {where}/base_fingerprint.json)"
        ]
    if ident.same:
        return []
    d = ident.difference
    assert d is not None
    names = (d.changed + d.retyped + d.reshaped + d.only_a + d.only_b)[:3]
    what = f"{d.num_differing} tensors differ ({', '.join(names)}{', ...' if d.num_differing > 3 else ''})"
    if ident.characterisation is not None:
        what += f"; {ident.characterisation.verdict}"
    else:
        source = ident.recorded_source or "unknown folder"
        what += f"; the recorded base ({source}) is not here unchanged to characterise the difference"
    if not allow_base_mismatch:
        raise TuneproofError(
            f"the base is not the one the adapter was trained on: {what}",
            "merge onto the recorded base, or pass {allow_base_mismatch} to merge anyway",
            fields=("allow_base_mismatch",),
        )
    return [f"MERGING ONTO A DIFFERENT BASE (mismatch allowed): {what}"]


def merge_adapter(
    base: Path,
    adapter_dir: Path,
    out: Path,
    dtype: str | None = None,
    allow_base_mismatch: bool = False,
    progress: Callable[[int], None] | None = None,
) -> MergeResult:
    """Check everything, check the base's identity, then write the merged model to `out`. The result's
    `warnings` are every one the command prints."""
    merge_plan = plan(base, adapter_dir, out, dtype)
    ident = identity(merge_plan.base, adapter_dir)
    said = judge_identity(ident, allow_base_mismatch, adapter_dir)
    return run(merge_plan, ident, progress, said)


def _holds(checkpoint: Checkpoint, recorded: Fingerprint, names: list[str]) -> bool:
    """Whether `checkpoint` still holds the recorded bytes of `names` (a folder can change after the
    fingerprint was taken: then it cannot stand for the trained-on base)."""
    import hashlib

    shard_of = checkpoint.shard_of()
    for name in names:
        h = hashlib.sha256()
        with shard_of[name].path.open("rb") as f:
            for piece in iter_chunks(checkpoint.tensors[name], f):
                h.update(piece)
        if h.hexdigest() != recorded.tensors[name][2]:
            return False
    return True


def run(
    merge_plan: MergePlan,
    ident: Identity,
    progress: Callable[[int], None] | None = None,
    identity_warnings: list[str] | None = None,
) -> MergeResult:
    """Write the merged model. `progress(n)` is called with each tensor's byte count; the result's
    warnings are the plan's notes and `identity_warnings` (what `judge_identity` returned)."""
    out = merge_plan.out
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        merged, copied, written = _write_shards(merge_plan, tmp, progress)
        _copy_side_files(merge_plan, tmp)
        _write_index(merge_plan, tmp, written)
        _write_record(merge_plan, ident, tmp)
        os.chmod(tmp, 0o777 & ~umask())
        if out.exists():
            raise TuneproofError(f"{out} appeared while merging", "pass a new folder")
        os.rename(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise TuneproofError(
            f"writing the merged model failed: {e.strerror or e}", "free space or pass another output folder"
        ) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    warnings = [*merge_plan.notes, *(identity_warnings or [])]
    return MergeResult(
        out, merged, copied, len(merge_plan.adapter.modules), sum(written.values()), ident,
        merge_plan.dtype, warnings,
    )  # fmt: skip


def _write_shards(
    merge_plan: MergePlan, tmp: Path, progress: Callable[[int], None] | None
) -> tuple[int, int, dict[str, int]]:
    import torch

    base, adapter, model = merge_plan.base, merge_plan.adapter, merge_plan.model
    pending: dict[str, Any] = {}  # checkpoint key -> fp32 delta piece, computed per parameter on first need
    stored = set(base.tensors)
    merged = copied = 0
    written: dict[str, int] = {}
    with adapter.header.path.open("rb") as af:
        for shard in base.shards:
            infos = sorted(shard.tensors.values(), key=lambda t: t.begin)
            out_dtype = {i.name: _out_dtype(merge_plan, i) for i in infos}
            writer = ShardWriter(
                tmp / shard.path.name, [(i.name, out_dtype[i.name], i.shape) for i in infos], shard.metadata
            )
            try:
                with shard.path.open("rb") as f:
                    for info in infos:
                        if info.name in merge_plan.targets:
                            module, param = merge_plan.targets[info.name]
                            if info.name not in pending:
                                d = delta(module, read_tensor(module.a, af), read_tensor(module.b, af))
                                pending.update(checkpoint_pieces(model, param, d, stored))
                            w = read_tensor(info, f).float()
                            w += pending.pop(info.name)  # in place: one fp32 copy of the tensor alive
                            if not bool(torch.isfinite(w).all()):
                                raise TuneproofError(
                                    f"merging {module.path} into {info.name} gives non-finite values",
                                    "check the adapter: it holds inf or NaN",
                                )
                            writer.write(info.name, _as_bytes(w, out_dtype[info.name], info.name))
                            merged += 1
                        elif out_dtype[info.name] != info.dtype:
                            writer.write(
                                info.name, _as_bytes(read_tensor(info, f), out_dtype[info.name], info.name)
                            )
                            copied += 1
                        else:
                            writer.write(info.name, iter_chunks(info, f))
                            copied += 1
                        if progress:
                            progress(info.nbytes)
                writer.close()
            except BaseException:
                writer.abort()
                raise
            written[shard.path.name] = writer.total
    assert not pending, f"delta pieces never written: {sorted(pending)[:3]}"
    return merged, copied, written


def _out_dtype(merge_plan: MergePlan, info: TensorInfo) -> str:
    if merge_plan.dtype is not None and info.dtype in FLOAT_DTYPES:
        return merge_plan.dtype
    return info.dtype


def _as_bytes(tensor: Any, st_dtype: str, name: str) -> memoryview:
    """The tensor cast once to `st_dtype`, as a view of its bytes (no copy beyond the cast). A cast
    that turns finite values into inf (fp16 tops out at 65,504) is refused, never written."""
    import torch

    from tuneproof.ship.tensors import TORCH_DTYPES

    t = tensor.to(getattr(torch, TORCH_DTYPES[st_dtype])).contiguous()
    if t.is_floating_point() and not bool(torch.isfinite(t).all()) and bool(torch.isfinite(tensor).all()):
        raise TuneproofError(
            f"{name} overflows {st_dtype}: its largest value is {float(tensor.abs().max()):.4g}",
            "merge to bf16 or fp32 instead",
        )
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def _copy_side_files(merge_plan: MergePlan, tmp: Path) -> None:
    """config, generation config, tokenizer, chat template, licence: every file of the base folder that
    is not a weight file, copied; config.json gets the new dtype when one was asked for."""
    base = merge_plan.base.folder
    for path in sorted(base.iterdir()):
        if not path.is_file() or path.name.endswith(WEIGHT_SUFFIXES) or path.name == INDEX_NAME:
            continue
        if path.name == "config.json" and merge_plan.dtype is not None:
            config = dict(merge_plan.config)
            for key in ("dtype", "torch_dtype"):
                if key in config or key == "dtype":
                    config[key] = CONFIG_DTYPE[merge_plan.dtype]
            (tmp / path.name).write_text(json.dumps(config, indent=2) + "\n")
            continue
        shutil.copy2(path, tmp / path.name)


def _write_index(merge_plan: MergePlan, tmp: Path, written: dict[str, int]) -> None:
    weight_map = {name: shard.path.name for shard in merge_plan.base.shards for name in shard.tensors}
    metadata = dict(merge_plan.base.index_metadata.get("metadata") or {})
    metadata["total_size"] = sum(written.values())
    (tmp / INDEX_NAME).write_text(
        json.dumps({"metadata": metadata, "weight_map": dict(sorted(weight_map.items()))}, indent=2) + "\n"
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tuneproof")
    except PackageNotFoundError:
        return "(version unknown)"


def _write_record(merge_plan: MergePlan, ident: Identity, tmp: Path) -> None:
    adapter_sha = hashlib.sha256(merge_plan.adapter.header.path.read_bytes()).hexdigest()
    record = {
        "tool": f"tuneproof merge {_version()}",
        "base": str(merge_plan.base.folder),
        "adapter": str(merge_plan.adapter.folder),
        "adapter_sha256": adapter_sha,
        "dtype": merge_plan.dtype or "as stored",
        "merged_tensors": len(merge_plan.targets),
        "base_identity": "checked, same"
        if ident.same
        else ("NOT the recorded base" if ident.recorded else "unchecked"),
    }
    (tmp / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n")
