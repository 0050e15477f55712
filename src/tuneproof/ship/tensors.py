"""Safetensors files read and written by hand: headers checked before any byte is trusted, tensors
read one at a time, bytes copied without decoding.

The format (https://github.com/huggingface/safetensors, README "Format"): 8 bytes little-endian
header length N, N bytes of UTF-8 JSON `{name: {dtype, shape, data_offsets: [begin, end]},
"__metadata__": {str: str}}`, then the data buffer; offsets are relative to the buffer. Nothing
here loads a model, and nothing holds more than one tensor in memory.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tuneproof.core.dtypes import BY_SAFETENSORS, SAFETENSORS_BITS, TORCH_BY_SAFETENSORS
from tuneproof.core.errors import TuneproofError

FLOAT_DTYPES = tuple(BY_SAFETENSORS)  # the floats a merge reads as numbers
MAX_HEADER = 100 * 2**20  # the safetensors library's own limit (`N_MAX_HEADER`)
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
COPY_CHUNK = 8 * 2**20


@dataclass(kw_only=True, frozen=True, slots=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute file offsets of the tensor's bytes
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True, slots=True)
class Header:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


def read_header(path: Path) -> Header:
    """The header of one safetensors file, checked against the file: a length that fits, JSON of the
    right shape, known dtypes, offsets that match shape x dtype, stay inside the file and do not overlap."""
    path = Path(path)
    if path.suffix == ".bin" or path.name.endswith((".pt", ".pth", ".pkl")):
        raise TuneproofError(
            f"{path} is a pickle file, which can run code when loaded",
            "convert it to safetensors (safetensors.torch.save_file) on a machine you trust",
        )
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _corrupt(path, f"{size} bytes, shorter than the 8-byte header length")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER or 8 + length > size:
                raise _corrupt(path, f"header length {length} does not fit the file's {size} bytes")
            raw = f.read(length)
    except OSError as e:
        raise TuneproofError(
            f"cannot read {path}: {e.strerror}", "pass a readable safetensors file"
        ) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _corrupt(path, "the header is not JSON") from None
    if not isinstance(data, dict):
        raise _corrupt(path, "the header is not a JSON object")
    metadata = data.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise _corrupt(path, "__metadata__ is not an object")
    start = 8 + length
    tensors: dict[str, TensorInfo] = {}
    for name, entry in data.items():
        tensors[name] = _entry(path, name, entry, start, size)
    spans = sorted((t.begin, t.end, t.name) for t in tensors.values() if t.end > t.begin)
    for (_, end, a), (begin, _, b) in itertools.pairwise(spans):
        if begin < end:
            raise _corrupt(path, f"tensors {a} and {b} overlap")
    return Header(path, tensors, {str(k): str(v) for k, v in metadata.items()})


def _entry(path: Path, name: str, entry: Any, start: int, size: int) -> TensorInfo:
    if not isinstance(entry, dict):
        raise _corrupt(path, f"entry {name!r} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in SAFETENSORS_BITS:
        raise _corrupt(path, f"{name} has unknown dtype {dtype!r}")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise _corrupt(path, f"{name} has a bad shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)):
        raise _corrupt(path, f"{name} has bad data_offsets {offsets!r}")
    begin, end = offsets
    want = (math.prod(shape) * SAFETENSORS_BITS[dtype] + 7) // 8
    if not 0 <= begin <= end or end - begin != want:
        raise _corrupt(path, f"{name} holds {end - begin} bytes, its {dtype} shape {shape} needs {want}")
    if start + end > size:
        raise _corrupt(path, f"{name} ends at byte {start + end}, past the end of the file ({size} bytes)")
    return TensorInfo(name=name, dtype=dtype, shape=tuple(shape), begin=start + begin, end=start + end)


def _corrupt(path: Path, why: str) -> TuneproofError:
    return TuneproofError(
        f"{path} is not a valid safetensors file: {why}", "re-download or re-save it; it may be truncated"
    )


@dataclass(kw_only=True, frozen=True, slots=True)
class Checkpoint:
    """A model folder's safetensors: one file, or shards listed by `model.safetensors.index.json`."""

    folder: Path
    shards: tuple[Header, ...]
    index_metadata: dict[str, Any]
    tensors: dict[str, TensorInfo] = field(init=False)  # every tensor of every shard, by name
    _shard_of: dict[str, Header] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", {n: t for s in self.shards for n, t in s.tensors.items()})
        object.__setattr__(self, "_shard_of", {n: s for s in self.shards for n in s.tensors})

    def shard_of(self) -> dict[str, Header]:
        return self._shard_of

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())


def open_checkpoint(folder: Path, what: str = "model folder") -> Checkpoint:
    """The safetensors of `folder`, every header checked; an index must agree with its shards."""
    folder = Path(folder)
    if not folder.is_dir():
        if folder.is_file() and folder.suffix == ".safetensors":
            return Checkpoint(folder=folder.parent, shards=(read_header(folder),), index_metadata={})
        raise TuneproofError(f"{what} {folder} is not a folder", "pass the folder holding the safetensors")
    index = folder / INDEX_NAME
    if index.is_file():
        try:
            data = json.loads(index.read_text())
            weight_map = data["weight_map"]
            assert isinstance(weight_map, dict)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AssertionError):
            raise TuneproofError(
                f"{index} is not a safetensors index (no weight_map)", "re-save the model or remove the index"
            ) from None
        names = sorted(set(map(str, weight_map.values())))
        shards = []
        for name in names:
            shard_path = folder / name
            if Path(name).name != name or not shard_path.is_file():
                raise TuneproofError(
                    f"{index} names shard {name!r}, which is not in {folder}", "copy the missing shard"
                )
            shards.append(read_header(shard_path))
        checkpoint = Checkpoint(
            folder=folder,
            shards=tuple(shards),
            index_metadata={k: v for k, v in data.items() if k != "weight_map"},
        )
        held = checkpoint.shard_of()
        for tensor, file in weight_map.items():
            if tensor not in held or held[tensor].path.name != file:
                raise TuneproofError(
                    f"{index} places {tensor} in {file}, which does not hold it", "re-save the model"
                )
        return checkpoint
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in [*folder.glob("*.bin"), *folder.glob("*.pt")])
        if pickles:
            raise TuneproofError(
                f"{folder} holds only pickle weights ({', '.join(pickles[:3])}), which can run "
                "code when loaded",
                "convert them to safetensors on a machine you trust",
            )
        raise TuneproofError(f"{what} {folder} holds no .safetensors file", "pass a model folder")
    if len(files) > 1:
        raise TuneproofError(
            f"{folder} holds {len(files)} safetensors files and no {INDEX_NAME}",
            "add the index or pass one file",
        )
    return Checkpoint(folder=folder, shards=(read_header(files[0]),), index_metadata={})


def read_exact(f: IO[bytes], offset: int, into: memoryview, name: str) -> None:
    """Fill `into` with the file's bytes from `offset` (a read can return less than asked: looped)."""
    f.seek(offset)
    done, want = 0, into.nbytes
    while done < want:
        got = f.readinto(into[done:])  # type: ignore[attr-defined]
        if not got:
            raise TuneproofError(f"{name} is cut short in its file", "re-download the model")
        done += got


def read_tensor(info: TensorInfo, f: IO[bytes]) -> Any:
    """One tensor as a torch tensor of its own dtype (copied out of the file: nothing stays mapped)."""
    import torch

    dtype = TORCH_DTYPES.get(info.dtype)
    if dtype is None:
        raise TuneproofError(f"{info.name} is stored as {info.dtype}, which cannot be read as numbers here")
    if not info.nbytes:
        return torch.empty(info.shape, dtype=getattr(torch, dtype))
    data = bytearray(info.nbytes)  # read straight into the buffer the tensor will own: one copy
    read_exact(f, info.begin, memoryview(data), info.name)
    return torch.frombuffer(data, dtype=getattr(torch, dtype)).reshape(info.shape)


TORCH_DTYPES = TORCH_BY_SAFETENSORS  # safetensors code -> torch attribute
SAFETENSORS_DTYPE = {torch_name: st for st, torch_name in TORCH_DTYPES.items()}


def iter_chunks(info: TensorInfo, f: IO[bytes], buffer: bytearray | None = None) -> Iterator[memoryview]:
    """A tensor's bytes in pieces of at most COPY_CHUNK, read into one reused buffer (`buffer`, or one
    made here): each piece is valid until the next is asked for, and nothing else is allocated."""
    buffer = buffer if buffer is not None else bytearray(min(info.nbytes, COPY_CHUNK))
    view = memoryview(buffer)
    done = 0
    while done < info.nbytes:
        n = min(info.nbytes - done, len(buffer))
        read_exact(f, info.begin + done, view[:n], info.name)
        done += n
        yield view[:n]


class ShardWriter:
    """Writes one safetensors file whose header is known up front, tensor by tensor in header order.

    `entries` are (name, dtype, shape); `put(name, piece)` calls must follow that order and give exactly
    the bytes each entry needs. The header is padded with spaces to 8 bytes, as safetensors does."""

    def __init__(self, path: Path, entries: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str]):
        header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
        offset = 0
        self.sizes: list[tuple[str, int]] = []
        for name, dtype, shape in entries:
            size = (math.prod(shape) * SAFETENSORS_BITS[dtype] + 7) // 8
            header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
            self.sizes.append((name, size))
            offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.path = path
        self.f: IO[bytes] = path.open("xb")
        self.f.write(struct.pack("<Q", len(raw)) + raw)
        self.next = 0
        self.got = 0  # bytes of tensor `next` written so far
        self.total = offset

    def put(self, name: str, piece: bytes | memoryview) -> None:
        """The next bytes of tensor `name`: pieces of one tensor follow each other, tensors follow the
        header's order, and a tensor is done when its bytes are all there."""
        want_name, want = self.sizes[self.next]
        assert name == want_name, f"{name} written out of order (expected {want_name})"
        n = memoryview(piece).nbytes
        assert self.got + n <= want, f"{name}: {self.got + n} bytes, header says {want}"
        self.f.write(piece)
        self.got += n
        if self.got == want:
            self.next, self.got = self.next + 1, 0

    def close(self) -> None:
        assert self.next == len(self.sizes), "not every tensor was written"
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()

    def abort(self) -> None:
        self.f.close()
