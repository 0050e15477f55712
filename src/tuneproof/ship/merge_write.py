"""Writing a merged model: W + scaling * B @ A in one pass over the base (`ship.stream`: reading,
merging and writing overlap), without loading the base as a model.

Every adapted tensor is read whole into the stream's ring, gets its fp32 delta added and is rounded once
to the output dtype, in place when the dtype stays (PEFT's own `weight += delta`: the same bits); every
other tensor is written as read (or cast piece by piece, when the plan asks for one dtype throughout).
Memory is the ring plus one fp32 delta of the largest adapted tensor, never a shard, never the model.
Output goes to a temporary folder beside `out` and is renamed into place at the end: a failure leaves
nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.dtypes import BY_SHORT
from tuneproof.core.errors import TuneproofError
from tuneproof.core.interrupts import held_signals
from tuneproof.core.io import umask
from tuneproof.core.verdict import Verdict
from tuneproof.ship.adapter import Module, delta
from tuneproof.ship.layout import checkpoint_pieces
from tuneproof.ship.merge_identity import Identity, IdentityCheck
from tuneproof.ship.merge_plan import MERGE_DTYPES, MergePlan
from tuneproof.ship.stream import AFTER, Piece, Pipeline, ShardJob, Timings
from tuneproof.ship.tensors import FLOAT_DTYPES, INDEX_NAME, TORCH_DTYPES, TensorInfo, read_tensor

CONFIG_DTYPE = {d.safetensors: d.config for d in BY_SHORT.values()}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".ckpt")
RECORD_NAME = "tuneproof_merge.json"
BOUND_AFTER_S = 1.0  # a stream shorter than this is bound by nothing worth naming


@dataclass(kw_only=True, frozen=True, slots=True)
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
    timings: Timings | None = None  # where the stream's time went: each stage's busy seconds and the wall
    plan_seconds: float = 0.0  # reading headers and the adapter, the checks (and imports, the first time)
    import_seconds: float = 0.0  # of plan_seconds, importing torch, transformers and PEFT

    @property
    def base_identity(self) -> str:
        return self.identity.summary

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof merge --json` prints."""
        dtype = next((k for k, v in MERGE_DTYPES.items() if v == self.dtype), None) if self.dtype else None
        return {
            "out": str(self.out), "modules": self.modules, "merged_tensors": self.merged_tensors,
            "copied_tensors": self.copied_tensors, "bytes_written": self.bytes_written,
            "dtype": dtype or "as stored", "base_identity": self.base_identity, "warnings": self.warnings,
            "seconds": self.seconds(),
        }  # fmt: skip

    def seconds(self) -> dict[str, Any]:
        """Where the time went: planning (imports apart), the stream (its wall time; each stage's and each
        thread's busy seconds, which overlap; the thread that bounds it) and the finish (side files,
        index, record, rename)."""
        t = self.timings or Timings()
        threads = t.by_thread()
        return {
            "plan": round(self.plan_seconds, 3), "imports": round(self.import_seconds, 3),
            "stream": round(t.wall, 3), "finish": round(t.busy.get(AFTER, 0.0), 3),
            "busy": {k: round(v, 3) for k, v in t.busy.items() if k != AFTER},
            "by_thread": {k: round(v, 3) for k, v in threads.items()},
            "bound": max(threads, key=lambda k: threads[k]) if t.wall >= BOUND_AFTER_S else None,
        }  # fmt: skip

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import merge_lines, print_lines

        print_lines(console, merge_lines(self))


def write(
    merge_plan: MergePlan, check: IdentityCheck, progress: Callable[[int], None] | None = None
) -> MergeResult:
    """Write the merged model, checking the base's identity on the way (`check`). `progress(n)` is
    called with each piece's byte count; the result's warnings are the plan's notes and the identity's."""
    return_freed_memory()
    out = merge_plan.out
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        pipeline = Pipeline(_jobs(merge_plan, tmp), hashing=check.hashing, digest=check.seen)
        with _Merger(merge_plan, pipeline.timings) as merger, kernel_threads(spare_cores(2)):
            written = pipeline.run(merger.change, progress)
        assert not merger.pending, f"delta pieces never written: {sorted(merger.pending)[:3]}"
        ident, identity_warnings = check.result(merge_plan.base)
        t = time.perf_counter()
        _copy_side_files(merge_plan, tmp)
        _write_index(merge_plan, tmp, written)
        _write_record(merge_plan, ident, tmp)
        os.chmod(tmp, 0o777 & ~umask())
        if out.exists():
            raise TuneproofError(f"{out} appeared while merging", "pass a new folder")
        os.rename(tmp, out)
        pipeline.timings.add(AFTER, time.perf_counter() - t)
    except OSError as e:
        with held_signals():
            shutil.rmtree(tmp, ignore_errors=True)
        raise TuneproofError(
            f"writing the merged model failed: {e.strerror or e}", "free space or pass another output folder"
        ) from None
    except BaseException:
        with held_signals():  # a second Ctrl-C must not leave half of the partial folder
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    adapted = len(merge_plan.targets)
    return MergeResult(
        out=out, merged_tensors=adapted, copied_tensors=len(merge_plan.base.tensors) - adapted,
        modules=len(merge_plan.adapter.modules), bytes_written=sum(written.values()), identity=ident,
        dtype=merge_plan.dtype, warnings=[*merge_plan.notes, *identity_warnings], timings=pipeline.timings,
        plan_seconds=merge_plan.seconds, import_seconds=merge_plan.import_seconds,
    )  # fmt: skip


def _jobs(merge_plan: MergePlan, tmp: Path) -> list[ShardJob]:
    """One job per shard: adapted tensors are read whole, everything else in pieces."""
    jobs = []
    for shard in merge_plan.base.shards:
        infos = tuple(sorted(shard.tensors.values(), key=lambda t: t.begin))
        entries = [(i.name, _out_dtype(merge_plan, i), i.shape) for i in infos]
        whole = frozenset(i.name for i in infos if i.name in merge_plan.targets)
        jobs.append(
            ShardJob(
                source=shard.path,
                out=tmp / shard.path.name,
                tensors=infos,
                entries=entries,
                metadata=shard.metadata,
                whole=whole,
            )
        )
    return jobs


class _Merger:
    """What is done to each piece on the merging thread: an adapted tensor gets its delta added in fp32
    and is rounded once, in place in the bytes read when its dtype stays; a tensor whose dtype changes is
    cast; everything else is written as read."""

    def __init__(self, merge_plan: MergePlan, timings: Timings):
        self.plan, self.timings = merge_plan, timings
        self.pending: dict[str, Any] = {}  # checkpoint key -> fp32 delta piece of a split parameter
        self.stored = set(merge_plan.base.tensors)
        self.scratch: Any = None  # one fp32 buffer reused for every plain delta (no fresh pages each time)
        self.adapter_file = merge_plan.adapter.header.path.open("rb")

    def __enter__(self) -> _Merger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.adapter_file.close()

    def change(self, piece: Piece) -> None:
        info = piece.info
        out_dtype = _out_dtype(self.plan, info)
        if info.name in self.plan.targets:
            self._merge(piece, out_dtype)
        elif out_dtype != info.dtype and piece.data.nbytes:
            t = time.perf_counter()
            piece.out = _cast(piece.data, info, out_dtype)
            self.timings.add("cast", time.perf_counter() - t)

    def _merge(self, piece: Piece, out_dtype: str) -> None:
        import torch

        info = piece.info
        if not info.nbytes:
            return  # an empty tensor: nothing to add
        module, param = self.plan.targets[info.name]
        t0 = time.perf_counter()
        w = torch.frombuffer(piece.data, dtype=_torch(info.dtype)).view(info.shape)
        d = self._delta(info, module, param)
        t1 = time.perf_counter()
        out = w if out_dtype == info.dtype else torch.empty(info.shape, dtype=_torch(out_dtype))
        # PEFT rounds an embedding's or a ParamWrapper's delta to the weight's dtype first; with another
        # output dtype there is no PEFT merge to equal, and the exact sum is rounded once
        rounded = w.dtype if module.rounds_delta and out is w else None
        sums = accumulate(w, d, out, rounded)
        t2 = time.perf_counter()
        low, high = torch.aminmax(out)  # NaN and inf show in the extremes; one pass, nothing allocated
        if not (bool(torch.isfinite(low)) and bool(torch.isfinite(high))):
            self._refuse(info, module, out, sums, out_dtype)
        if out is not w:
            piece.out = _as_bytes(out)
        self.timings.add("delta", t1 - t0)
        self.timings.add("add and round", t2 - t1)
        self.timings.add("finite check", time.perf_counter() - t2)

    def _refuse(self, info: TensorInfo, module: Module, out: Any, sums: Any, out_dtype: str) -> None:
        """A merge that gives inf or NaN is refused, never written, naming whose they are: the base's
        tensor (read again: the merge overwrote it), a sum that overflows the output dtype (fp16 tops out
        at 65,504), or the adapter."""
        import torch

        with self.plan.base.shard_of()[info.name].path.open("rb") as f:
            base = read_tensor(info, f)
        if not bool(torch.isfinite(base).all()):
            raise TuneproofError(
                f"the base's {info.name} holds inf or NaN, which the merge would keep",
                "check the base: re-download or re-save it",
            )
        overflow = torch.isfinite(sums.reshape(-1)) & ~torch.isfinite(out.reshape(-1))
        if bool(overflow.any()):
            largest = float(sums.reshape(-1)[overflow].abs().max())
            raise TuneproofError(
                f"{info.name} overflows {out_dtype}: its largest value is {largest:.4g}",
                "merge to bf16 or fp32 instead",
            )
        raise TuneproofError(
            f"merging {module.path} into {info.name} gives non-finite values",
            "check the adapter: it holds inf or NaN",
        )

    def _delta(self, info: TensorInfo, module: Module, param: str) -> Any:
        """scaling * B @ A in fp32, shaped like the stored tensor: for a plain linear stored as the
        parameter itself, computed into the reused buffer; otherwise as PEFT lays it out, split the way
        the checkpoint stores the parameter (`checkpoint_pieces`)."""
        import torch

        a, b = read_tensor(module.a, self.adapter_file), read_tensor(module.b, self.adapter_file)
        if _plain(info.name, module, param):
            if self.scratch is None:
                targets = self.plan.targets.items()
                largest = max(self.plan.base.tensors[k].numel for k, mp in targets if _plain(k, *mp))
                self.scratch = torch.empty(largest, dtype=torch.float32)
            d = self.scratch[: info.numel].view(info.shape)
            return torch.mm(b.float(), a.float(), out=d).mul_(module.scaling)  # PEFT's own ops: same bits
        if info.name not in self.pending:
            self.pending.update(checkpoint_pieces(self.plan.model, param, delta(module, a, b), self.stored))
        return self.pending.pop(info.name)


def _plain(name: str, module: Module, param: str) -> bool:
    """A linear's weight stored as the parameter itself: its delta is B @ A, nothing to lay out."""
    return module.kind == "linear" and not module.fan_in_fan_out and param == name


ADD_BLOCK = 2**18  # elements added and rounded at a time: 1 MiB of fp32, which stays in cache


def accumulate(w: Any, d: Any, out: Any, rounded: Any = None) -> Any:
    """out = round(w + d): the sum taken in fp32 (fp64 for an fp64 tensor) and rounded once to out's
    dtype, as PEFT's `weight.data += delta` does, block by block so the fp32 sums stay in cache. With
    `rounded` (a dtype), the delta is first rounded to it, as PEFT does for embeddings and ParamWrapper.
    Returns the unrounded sums; `out` may be `w` itself. `d` is written: it is a view or a copy of this
    piece's own delta, never shared with another piece's elements."""
    import torch

    if w.dtype == torch.float64:
        sums = w + (d.to(rounded) if rounded is not None else d)
        out.copy_(sums)
        return sums
    wf, of = w.reshape(-1), out.reshape(-1)
    sums = d.reshape(-1)
    for i in range(0, sums.numel(), ADD_BLOCK):
        block = sums[i : i + ADD_BLOCK]
        if rounded is not None:
            block.copy_(block.to(rounded))
        block.add_(wf[i : i + ADD_BLOCK])  # fp32 + the stored value, exact in either order
        of[i : i + ADD_BLOCK].copy_(block)  # rounded once
    return sums


def _out_dtype(merge_plan: MergePlan, info: TensorInfo) -> str:
    if merge_plan.dtype is not None and info.dtype in FLOAT_DTYPES:
        return merge_plan.dtype
    return info.dtype


def _torch(st_dtype: str) -> Any:
    import torch

    return getattr(torch, TORCH_DTYPES[st_dtype])


def _cast(data: memoryview, info: TensorInfo, st_dtype: str) -> memoryview:
    """A piece of a copied tensor cast to `st_dtype`. A cast that turns finite values into inf (fp16
    tops out at 65,504) is refused, never written; inf or NaN the base already holds are kept."""
    import torch

    source = torch.frombuffer(data, dtype=_torch(info.dtype))
    cast = source.to(_torch(st_dtype))
    if cast.is_floating_point():
        low, high = torch.aminmax(cast)
        if not (bool(torch.isfinite(low)) and bool(torch.isfinite(high))):
            overflow = torch.isfinite(source) & ~torch.isfinite(cast)
            if bool(overflow.any()):
                raise TuneproofError(
                    f"{info.name} overflows {st_dtype}: its largest value is "
                    f"{float(source[overflow].abs().max()):.4g}",
                    "merge to bf16 or fp32 instead",
                )
    return _as_bytes(cast)


def _as_bytes(tensor: Any) -> memoryview:
    """A contiguous tensor's bytes, without a copy."""
    import torch

    return memoryview(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())


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
        "base_identity": ident.summary,
    }
    (tmp / RECORD_NAME).write_text(json.dumps(record, indent=2) + "\n")


def spare_cores(busy: int) -> int:
    """The cores this process may use, less `busy` (the reader and writer threads), at least one."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores - busy)


@contextmanager
def kernel_threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to `n` for the block, then put back: the merge's kernels share the
    cores with the reader and writer, and on 2 cores two kernel threads fighting them made the adds 4x
    slower (bench/merge.py)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
