"""Streaming reader for PyTorch profiler (Kineto) Chrome traces: the kernel table's events without the
whole document in memory.

The file (.json, or gzip whatever its name) is decoded in 4 MiB text chunks; the top-level object is
walked key by key and each `traceEvents` element is decoded on its own with the C scanner behind
`json.JSONDecoder.raw_decode`, checked, and either kept as a compact event or dropped. What is kept:

- complete ("X") events of the device categories (kernel, gpu_memcpy, gpu_memset), and the CPU operator
  rows (cpu_op) only until the first device row is seen: the table reads CPU operators only from a
  trace with no device rows, so once one appears they are dropped;
- per kept event the keys the table reads: ph, name, cat, ts, dur, pid, tid and args with stream and
  device when the trace has them (one shared args dict per (stream, device) pair; names interned);
- every top-level key but `traceEvents` (deviceProperties, distributedInfo, displayTimeUnit,
  traceName, schemaVersion, ...), as the trace has them.

Old Kineto files name the categories "Kernel", "Memcpy", "Memset", "Runtime" and "Operator"; they are
kept under today's names (kernel, gpu_memcpy, gpu_memset, cuda_runtime, cpu_op). Times stay as the
trace has them, microseconds: Chrome's `displayTimeUnit` ("ms" or "ns") only says how a viewer shows
them, and Kineto's nanosecond-resolution traces (PyTorch #122425) write ts and dur as microseconds
with three decimals (HolisticTraceAnalysis reads them the same way, rounding ts up and the end down).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file

DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
CPU_CAT = "cpu_op"
# old Kineto category names (PyTorch 1.8-1.9 traces) -> today's
OLD_CATS = {"memcpy": "gpu_memcpy", "memset": "gpu_memset", "runtime": "cuda_runtime", "operator": "cpu_op"}
CHUNK = 4 << 20  # characters decoded per read
_FAR = 1 << 20  # a decode error this far before the buffer's end is not a chunk boundary
_WS = " \t\n\r"
_NUMBER = (int, float)
_DECODER = json.JSONDecoder()
_READ_ERRORS = (OSError, EOFError, zlib.error, UnicodeDecodeError, json.JSONDecodeError, RecursionError)


def unreadable(p: Path, e: BaseException) -> TuneproofError:
    return TuneproofError(
        f"trace {p} is not a readable JSON trace: {type(e).__name__}: {str(e)[:120]}",
        "pass the file export_chrome_trace or the tensorboard handler wrote",
    )


def malformed(i: int, name: Any, ts: Any, dur: Any) -> TuneproofError:
    return TuneproofError(
        f"trace event {i} is malformed (name {name!r}, ts {ts!r}, dur {dur!r})",
        "pass an unedited profiler trace: every complete event has a name and finite ts/dur",
    )


def open_text(p: Path) -> IO[str]:
    """The file as text, gunzipped when it starts with the gzip magic whatever its name."""
    with p.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    raw = gzip.open(p, "rb") if gz else p.open("rb")  # noqa: SIM115 (closed with the wrapper)
    return io.TextIOWrapper(raw, encoding="utf-8-sig")


class _Stream:
    """A text buffer over the file that decodes one JSON value at a time."""

    def __init__(self, f: IO[str]) -> None:
        self.f, self.buf, self.pos, self.eof = f, "", 0, False

    def fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.f.read(CHUNK)
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + chunk
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ('' at the end of the file)."""
        while True:
            n = len(self.buf)
            while self.pos < n and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < n:
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def expect(self, chars: str) -> str:
        c = self.peek()
        if not c or c not in chars:
            raise json.JSONDecodeError(f"expecting one of {chars!r}", self.buf, self.pos)
        self.pos += 1
        return c

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                obj, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as e:
                far = e.pos < len(self.buf) - _FAR and not e.msg.startswith("Unterminated string")
                if far or not self.fill():
                    raise
                continue
            if end == len(self.buf) and self.fill():  # a number cut at the chunk's end
                continue
            self.pos = end
            return obj


def _compact(e: dict[str, Any], cat: str, names: dict[str, str], args_cache: dict[Any, Any]) -> dict:
    out = {
        "ph": "X",
        "cat": cat,
        "name": names.setdefault(e["name"], e["name"]),
        "ts": e["ts"],
        "dur": e["dur"],
        "pid": e.get("pid"),
        "tid": e.get("tid"),
    }
    a = e.get("args")
    if isinstance(a, dict) and ("stream" in a or "device" in a):
        key = (a.get("stream"), a.get("device"), "stream" in a, "device" in a)
        shared = args_cache.get(key)
        if shared is None:
            shared = args_cache[key] = {k: a[k] for k in ("stream", "device") if k in a}
        out["args"] = shared
    return out


def check_event(i: int, e: Any) -> bool:
    """True for a complete event with a duration; a malformed one is refused with its index."""
    if not isinstance(e, dict) or e.get("ph") != "X" or "dur" not in e:
        return False
    ts: Any = e.get("ts")
    dur: Any = e.get("dur")
    name = e.get("name")
    if type(ts) in _NUMBER and type(dur) in _NUMBER and isinstance(name, str):  # the common case
        if math.isfinite(ts) and math.isfinite(dur) and dur >= 0:
            return True
        raise malformed(i, name, ts, dur)
    numbers = [x for x in (ts, dur) if isinstance(x, int | float) and not isinstance(x, bool)]
    if isinstance(name, str) and len(numbers) == 2 and all(map(math.isfinite, numbers)) and numbers[1] >= 0:
        return True
    raise malformed(i, name, ts, dur)


class _Collector:
    """Keeps the table's events: device rows, and CPU operators until the first device row."""

    def __init__(self) -> None:
        self.device: list[dict[str, Any]] = []
        self.cpu: list[dict[str, Any]] = []
        self.names: dict[str, str] = {}
        self.args: dict[Any, Any] = {}
        self.count = 0
        self.cats: dict[str, str] = {}  # the trace's category -> today's lower-case name
        self.runtime: str | None = None  # "cuda" | "hip", from the first runtime call's name

    def add(self, items: list[Any]) -> None:
        """Check and keep or drop each of `items`, the next events in trace order."""
        cats, keep_cpu = self.cats, not self.device
        start = self.count
        self.count += len(items)
        for i, e in enumerate(items, start):
            if type(e) is not dict or e.get("ph") != "X" or "dur" not in e:
                continue
            ts: Any = e.get("ts")
            dur: Any = e["dur"]
            # finite, non-negative numbers and a str name; anything else goes to check_event's full test
            fast = type(ts) in _NUMBER and type(dur) in _NUMBER and type(e.get("name")) is str
            if not (fast and ts - ts == 0 and dur - dur == 0 and dur >= 0) and not check_event(i, e):
                continue
            raw = e.get("cat")
            cat = cats.get(raw) if isinstance(raw, str) else None
            if cat is None:
                cat = raw.lower() if isinstance(raw, str) else str(raw or "").lower()
                cat = OLD_CATS.get(cat, cat)
                if isinstance(raw, str):
                    cats[raw] = cat
            if cat in DEVICE_CATS:
                if keep_cpu:
                    self.cpu, keep_cpu = [], False
                self.device.append(_compact(e, cat, self.names, self.args))
            elif cat == CPU_CAT and keep_cpu:
                self.cpu.append(_compact(e, cat, self.names, self.args))
            elif cat == "cuda_runtime" and self.runtime is None:
                self.runtime = "hip" if e["name"].startswith("hip") else "cuda"

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.device or self.cpu


def _batch(s: _Stream, add: Callable[[list[Any]], None]) -> bool:
    """Decode the events up to the buffer's last '},' before a '{' in one json.loads call (the C
    scanner, no Python work per event). Correct wherever the cut lands: the text from an element's
    start parses as a bracketed list only when it ends at an element's end. False when it does not."""
    if len(s.buf) - s.pos < CHUNK // 2:
        s.fill()
    end = s.buf.rfind("},", s.pos)
    if end < 0 or end - s.pos < 4096 or s.buf[end + 2 : end + 64].lstrip()[:1] != "{":
        return False
    try:
        items = json.loads("[" + s.buf[s.pos : end + 1] + "]")
    except json.JSONDecodeError:
        return False
    add(items)
    s.pos = end + 1
    return True


def _events(s: _Stream, add: Callable[[list[Any]], None]) -> None:
    s.expect("[")
    if s.peek() == "]":
        s.pos += 1
        return
    misses = 0
    while True:
        if misses or not _batch(s, add):
            misses = (misses + 1) % 64  # after a miss, 64 events one by one before the next try
            add([s.value()])
        if s.expect(",]") == "]":
            return


def _document(s: _Stream, add: Callable[[list[Any]], None]) -> tuple[dict[str, Any], bool]:
    """Walk the top level: (metadata, whether a traceEvents list was there)."""
    first = s.peek()
    if first == "[":
        _events(s, add)
        return {}, True
    if first != "{":
        s.value()  # a bare JSON value: not a trace, or not JSON
        return {}, False
    s.pos += 1
    meta: dict[str, Any] = {}
    found = False
    if s.peek() == "}":
        s.pos += 1
        return meta, False
    while True:
        key = s.value()
        s.expect(":")
        if key == "traceEvents" and s.peek() == "[":
            _events(s, add)
            found = True
        else:
            meta[key] = s.value()
        if s.expect(",}") == "}":
            return meta, found


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.I)


@dataclass(kw_only=True, frozen=True, slots=True)
class Trace:
    """One profiler trace, read once and handed to every analysis (the kernel table, probe's cross-check,
    explain's device), as HolisticTraceAnalysis parses one `Trace` for all its analyzers.

    `events`: the complete events the analyses read (device rows, or the CPU operators of a trace with
    none; compact, see the module's docstring); `meta`: every top-level key but traceEvents, as the
    trace has them; `read_events`: events in the file, kept or not; `runtime`: "cuda" | "hip" from the
    first runtime call, None when the trace has none (or was not streamed)."""

    source: str  # the file read, or "<dict>" for a document handed in whole
    events: list[dict[str, Any]]
    meta: dict[str, Any]
    read_events: int
    runtime: str | None = None

    @classmethod
    def of(cls, document: dict[str, Any], source: str = "<dict>") -> Trace:
        """A whole Chrome-trace document already in memory (`json.load`'s dict): its events unfiltered."""
        events = document.get("traceEvents") or []
        meta = {k: v for k, v in document.items() if k != "traceEvents"}
        return cls(source=source, events=list(events), meta=meta, read_events=len(events))

    @property
    def rank(self) -> str | None:
        """distributedInfo.rank, else a 'rank-N' / 'rank_N' in the file name (HolisticTraceAnalysis
        reads only the "rank" key and takes 0 without it; its test traces are named rank-34...,
        sampled_rank-1...)."""
        info = self.meta.get("distributedInfo")
        if (
            isinstance(info, dict)
            and isinstance(info.get("rank"), int)
            and not isinstance(info["rank"], bool)
        ):
            return str(info["rank"])
        m = _RANK_IN_NAME.search(Path(self.source).name)
        return m.group(1) if m else None


def read_trace(p: Path) -> Trace:
    """The trace's kept events and top-level metadata; a file that is not a readable JSON trace, has
    no traceEvents list or holds a malformed complete event is refused."""
    c = _Collector()
    try:
        with open_text(p) as f:
            s = _Stream(f)
            meta, found = _document(s, c.add)
            if s.peek():
                raise json.JSONDecodeError("Extra data", s.buf, s.pos)
    except _READ_ERRORS as e:
        raise unreadable(p, e) from None
    if not found:
        raise TuneproofError(f"trace {p} has no traceEvents list", "pass a PyTorch profiler Chrome trace")
    return Trace(source=str(p), events=c.events, meta=meta, read_events=c.count, runtime=c.runtime)


def trace_files(paths: list[Path]) -> list[Path]:
    """The files to read: each path, a folder standing for its .json / .gz files (sorted by name)."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith((".json", ".gz")))
            if not found:
                raise TuneproofError(
                    f"folder {p} holds no .json or .gz trace", "pass trace files or their folder"
                )
            out.extend(found)
        else:
            out.append(p)
    return out


def load_trace(path: str | Path) -> Trace:
    """Read a Chrome trace (.json, or gzip-compressed whatever its name) into a `Trace`: streamed,
    keeping only the events the table reads and the top-level metadata (`read_trace`)."""
    return read_trace(input_file(path, "trace", "pass a profiler Chrome trace (.json or .json.gz)"))
