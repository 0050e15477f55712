"""Kernel table from a PyTorch profiler Chrome trace: device time per kernel class, top kernels,
and what the kernels' architecture tags say about the code path.

Source of time: device rows (cat kernel / gpu_memcpy / gpu_memset) when the trace has any; else the
CPU operator rows (cat cpu_op, self time: a row's duration minus its children's on the same thread),
and the table says so. Durations in a Chrome trace are microseconds; the table reports ms.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof import validate
from tuneproof.errors import TuneproofError
from tuneproof.io import input_file
from tuneproof.verdict import Unjudged

CLASSES = ("attention", "gemm", "communication", "memory", "other")
# what a profile's time splits into: the busy classes and the idle gaps between them
PROFILE_COLUMNS = (*CLASSES, "idle")
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}

# (class, pattern) on the lower-cased name; first match wins. Attention comes before GEMM because
# attention kernels are CUTLASS/cuDNN kernels too; communication before memory because NCCL kernels
# copy.
RULES: tuple[tuple[str, str], ...] = (
    ("attention", r"flash_fwd|flash_bwd|flash::|flashattn|flash_attn"),  # FlashAttention 2/3 (and SDPA flash)
    ("attention", r"fmha"),  # memory-efficient SDPA (fmha_cutlassF/B_*), cuDNN/CUTLASS fmha
    ("attention", r"cudnn.*sdpa|sdpa.*cudnn|cudnn_generated_fort_native_sdpa"),  # cuDNN SDPA
    ("attention", r"flex_attention"),  # flex: triton_tem_fused_flex_attention*, CPU flex HOP
    (
        "attention",
        r"scaled_dot_product|_efficient_attention|_flash_attention|attention_for_cpu",
    ),  # aten SDPA ops
    ("communication", r"nccl|c10d::|allreduce|all_reduce|allgather|all_gather|reduce_scatter|alltoall"),
    ("memory", r"memcpy|memset|aten::copy_|aten::_to_copy|aten::fill_|aten::zero_|aten::clone|contiguous"),
    ("gemm", r"grouped_mm|grouped_gemm|moe_gemm"),  # MoE grouped GEMMs
    (
        "gemm",
        r"nvjet|sm\d+_xmma|xmma_gemm|gemm|gemv|cublas|cutlass|s\d+gemm|tensorop",
    ),  # cuBLAS/CUTLASS kernels
    ("gemm", r"triton_tem_fused_(mm|addmm|bmm)"),  # inductor GEMM templates
    ("gemm", r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|addmv|mv|dot)$"),  # CPU operator rows
)
_COMPILED = tuple((cls, re.compile(p)) for cls, p in RULES)
# "sm80", "sm_90a", "sm120" and CUTLASS 2.x's "cutlass_80_" all name the architecture a kernel was built for
ARCH_TAG = re.compile(r"(?:^|[^a-z0-9])(?:sm_?|cutlass_)(\d{2,3})[a-z]?(?:[^0-9]|$)")


def classify(name: str) -> str:
    n = name.lower()
    for cls, pattern in _COMPILED:
        if pattern.search(n):
            return cls
    return "other"


def arch_tag(name: str) -> tuple[int, int] | None:
    """Compute capability from an 'sm80'/'sm_90a'/'sm120' tag in a kernel name."""
    m = ARCH_TAG.search(name.lower())
    if not m:
        return None
    digits = m.group(1)
    return int(digits[:-1]), int(digits[-1])


@dataclass(frozen=True, slots=True)
class ArchMismatch:
    tag: str
    capability: str
    device: str
    ms: float
    share: float
    examples: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "device_capability": self.capability,
            "device": self.device,
            "ms": self.ms,
            "share": self.share,
            "examples": self.examples,
        }

    @property
    def finding(self) -> str:
        return (
            f"{100 * self.share:.1f} % of device time runs kernels built for {self.tag} on a "
            f"{self.capability} device ({self.device}): a generic code path, not one tuned for this card"
        )


@dataclass(slots=True)
class KernelTable(Unjudged):
    """Busy time per class (shares are of busy time), and the idle time between the first start and the
    last end that no kernel (or CPU operator) covers: on a device, launch- or host-bound gaps; on the
    CPU, Python and dispatch overhead between operators."""

    source: str  # "device" | "cpu_ops"
    ms: dict[str, float]
    top: dict[str, list[tuple[str, float, int]]]  # class -> [(name, ms, calls)]
    arch_mismatch: list[ArchMismatch] = field(default_factory=list)
    device: dict[str, Any] | None = None
    idle_ms: float = 0.0

    @property
    def total_ms(self) -> float:
        return sum(self.ms.values())

    def share(self, cls: str) -> float:
        return self.ms.get(cls, 0.0) / self.total_ms if self.total_ms else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "total_ms": self.total_ms,
            "classes": {c: {"ms": self.ms.get(c, 0.0), "share": self.share(c)} for c in CLASSES},
            "top": {
                c: [{"name": n, "ms": ms, "calls": k} for n, ms, k in rows] for c, rows in self.top.items()
            },
            "idle_ms": self.idle_ms,
            "arch_mismatch": [m.to_dict() for m in self.arch_mismatch],
            "device": self.device,
        }

    def render(self, console: Any) -> None:
        from tuneproof.measure.render import render_kernels

        render_kernels(self, console)


@dataclass(frozen=True, slots=True)
class KernelsSpec:
    """`tuneproof kernels`: the Chrome trace to read and how many top kernels to list per class."""

    trace: Path
    top_n: int = 5

    def __post_init__(self) -> None:
        validate.integer("top_n", self.top_n, high=10_000)


@dataclass(frozen=True, slots=True)
class KernelsPlan:
    trace: dict[str, Any]  # the loaded Chrome trace
    top_n: int


def prepare(spec: KernelsSpec) -> KernelsPlan:
    """Read the trace (a missing, unreadable or event-less file is refused here)."""
    return KernelsPlan(load_trace(spec.trace), spec.top_n)


def run(plan: KernelsPlan, progress: Any = None) -> KernelTable:
    return _table(plan.trace, plan.top_n)


def load_trace(path: str | Path) -> dict[str, Any]:
    """Read a Chrome trace (.json, or gzip-compressed whatever its name) into a dict with `traceEvents`:
    streamed, keeping only the events the table reads and the top-level metadata (trace_read)."""
    from tuneproof.measure.trace_read import read_trace

    return read_trace(input_file(path, "trace", "pass a profiler Chrome trace (.json or .json.gz)"))


def _timed_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Complete ("X") events with a name and finite, non-negative ts and dur; a malformed one is refused."""
    out = []
    for i, e in enumerate(trace.get("traceEvents") or []):
        if not isinstance(e, dict) or e.get("ph") != "X" or "dur" not in e:
            continue
        ts, dur, name = e.get("ts"), e.get("dur"), e.get("name")
        numbers = [x for x in (ts, dur) if isinstance(x, int | float) and not isinstance(x, bool)]
        ok = (
            isinstance(name, str)
            and len(numbers) == 2
            and all(math.isfinite(x) for x in numbers)
            and numbers[1] >= 0
        )
        if not ok:
            raise TuneproofError(
                f"trace event {i} is malformed (name {name!r}, ts {ts!r}, dur {dur!r})",
                "pass an unedited profiler trace: every complete event has a name and finite ts/dur",
            )
        out.append(e)
    return out


INHERITED = ("attention", "gemm", "communication")


def _self_times(events: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(name, class, exclusive us) per CPU operator row: its duration minus its direct children's on
    the same thread. An operator nested inside an attention, GEMM or communication operator takes the
    outermost such ancestor's class: the mask conversion inside SDPA is attention time."""
    out: list[tuple[str, str, float]] = []
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[list[Any]] = []  # [end, name, class, self_us]
        for e in evs:
            ts, dur = float(e["ts"]), float(e["dur"])
            while stack and stack[-1][0] <= ts:
                _, name, cls, own = stack.pop()
                out.append((name, cls, own))
            cls = classify(e["name"])
            inherited = next((frame[2] for frame in stack if frame[2] in INHERITED), None)
            if stack:
                stack[-1][3] -= dur
            stack.append([ts + dur, e["name"], inherited or cls, dur])
        out.extend((name, cls, own) for _, name, cls, own in stack)
    return out


def _idle_ms(events: list[dict[str, Any]]) -> float:
    """Span from the first start to the last end, minus the union of the events' intervals."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events)
    if not spans:
        return 0.0
    busy, cur_start, cur_end = 0.0, spans[0][0], spans[0][1]
    for start, end in spans[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    busy += cur_end - cur_start
    return (max(e for _, e in spans) - spans[0][0] - busy) / 1e3


def kernel_table(trace: dict[str, Any], top_n: int = 5) -> KernelTable:
    """Sum time by class. Raises when the trace has no timed events."""
    validate.integer("top_n", top_n, high=10_000)
    return _table(trace, top_n)


def _table(trace: dict[str, Any], top_n: int) -> KernelTable:
    events = _timed_events(trace)
    device_rows = [e for e in events if str(e.get("cat", "")).lower() in DEVICE_CATS]
    if device_rows:
        source = "device"
        rows = [(e["name"], classify(e["name"]), float(e["dur"])) for e in device_rows]
    else:
        cpu = [e for e in events if str(e.get("cat", "")).lower() == "cpu_op"]
        source, rows = "cpu_ops", _self_times(cpu)
    if not rows:
        raise TuneproofError(
            "trace has no kernel or CPU operator events",
            "profile a step with torch.profiler (activities CPU and CUDA) and export it",
        )
    ms: dict[str, float] = defaultdict(float)
    per_name: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for name, cls, us in rows:
        ms[cls] += us / 1e3
        acc = per_name[(cls, name)]
        acc[0] += us / 1e3
        acc[1] += 1
    top: dict[str, list[tuple[str, float, int]]] = {}
    for (cls, name), (t, k) in sorted(per_name.items(), key=lambda kv: -kv[1][0]):
        if len(top.setdefault(cls, [])) < top_n:
            top[cls].append((name, t, int(k)))
    timed = (
        device_rows
        if source == "device"
        else [e for e in events if str(e.get("cat", "")).lower() == "cpu_op"]
    )
    table = KernelTable(source, dict(ms), top, idle_ms=_idle_ms(timed))
    props = trace.get("deviceProperties")
    if source == "device" and isinstance(props, list) and props and isinstance(props[0], dict):
        dev = props[0]
        table.device = {k: dev.get(k) for k in ("name", "computeMajor", "computeMinor") if k in dev}
        table.arch_mismatch = _mismatches([(n, us) for n, _, us in rows], dev, table.total_ms)
    return table


def _mismatches(rows: list[tuple[str, float]], dev: dict[str, Any], total_ms: float) -> list[ArchMismatch]:
    major, minor = dev.get("computeMajor"), dev.get("computeMinor")
    if not isinstance(major, int) or isinstance(major, bool) or total_ms <= 0:
        return []
    found: dict[tuple[int, int], list[Any]] = {}
    for name, us in rows:
        tag = arch_tag(name)
        if tag is None or tag[0] == int(major):
            continue
        acc = found.setdefault(tag, [0.0, []])
        acc[0] += us / 1e3
        if name not in acc[1] and len(acc[1]) < 3:
            acc[1].append(name)
    return [
        ArchMismatch(f"sm{a}{b}", f"{major}.{minor}", str(dev.get("name", "?")), t, t / total_ms, names)
        for (a, b), (t, names) in sorted(found.items(), key=lambda kv: -kv[1][0])
    ]
