"""Writing a merged model: W + scaling * B @ A streamed shard by shard, without loading the base as a
model.

Every adapted tensor is read alone, merged in fp32 and cast once to the output dtype; every other
tensor is copied as bytes (or cast, when the plan asks for one dtype throughout). Peak memory is one
tensor in fp32 plus the delta of one adapted parameter, never a shard, never the model. Output goes to
a temporary folder beside `out` and is renamed into place at the end: a failure leaves nothing.
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

from tuneproof.core.dtypes import BY_SHORT
from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import umask
from tuneproof.core.verdict import Verdict
from tuneproof.ship.adapter import delta
from tuneproof.ship.layout import checkpoint_pieces
from tuneproof.ship.merge_identity import Identity
from tuneproof.ship.merge_plan import MERGE_DTYPES, MergePlan
from tuneproof.ship.tensors import FLOAT_DTYPES, INDEX_NAME, ShardWriter, TensorInfo, iter_chunks, read_tensor

CONFIG_DTYPE = {d.safetensors: d.config for d in BY_SHORT.values()}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt")
RECORD_NAME = "tuneproof_merge.json"


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
    verdict: Verdict | None = None  # nothing is judged here: a base that is not the recorded one is refused

    @property
    def base_identity(self) -> str:
        if self.identity.same:
            return "same as recorded"
        return "DIFFERENT from recorded (allowed)" if self.identity.recorded else "unchecked"

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof merge --json` prints."""
        dtype = next((k for k, v in MERGE_DTYPES.items() if v == self.dtype), None) if self.dtype else None
        return {
            "out": str(self.out), "modules": self.modules, "merged_tensors": self.merged_tensors,
            "copied_tensors": self.copied_tensors, "bytes_written": self.bytes_written,
            "dtype": dtype or "as stored", "base_identity": self.base_identity, "warnings": self.warnings,
        }  # fmt: skip

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import merge_lines, print_lines

        print_lines(console, merge_lines(self))


def write(
    merge_plan: MergePlan,
    ident: Identity,
    progress: Callable[[int], None] | None = None,
    identity_warnings: list[str] | None = None,
) -> MergeResult:
    """Write the merged model. `progress(n)` is called with each tensor's byte count; the result's
    warnings are the plan's notes and `identity_warnings` (what `judge_identity` returned)."""
    return_freed_memory()
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


def return_freed_memory() -> None:
    """Make glibc hand freed buffers of 1 MiB and more back to the OS, for the rest of the process.

    glibc raises its mmap threshold after each large free (up to 32 MiB), so the merge's freed
    per-tensor buffers stay in the heap and the peak creeps up by a few hundred MiB; a fixed 1 MiB
    threshold (mallopt M_MMAP_THRESHOLD) hands them back. The setting is process-wide and cannot be
    undone: setting it turns off glibc's dynamic threshold for good (malloc.c `do_set_mmap_threshold`
    sets `no_dyn_threshold`; mallopt(3)), and no call turns it back on, so a library caller's process
    keeps a 1 MiB threshold after the merge. A no-op where glibc is not the allocator."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        if libc is not None and hasattr(libc, "mallopt"):
            libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD (malloc.h)
    except OSError:
        pass
