"""The device a trace ran on, read from the trace itself: CUDA with its compute capability, ROCm with
its gfx architecture, or none (a CPU-only trace), and the device's own limits.

Kineto writes `deviceProperties` (older versions `computeProperties`, with `major`, `minor`,
`multiProcessorCount`) from cudaGetDeviceProperties on CUDA and from hipGetDeviceProperties
on ROCm with the same keys, so a ROCm trace carries `computeMajor`/`computeMinor` too: HIP's
major.minor, 9.0 for every gfx9 part (gfx900, gfx906, gfx908, gfx90a all report it), which is not a
CUDA compute capability. A device is ROCm when its entry names a `gcnArchName`, its name is an AMD one,
its warp is 64 wide (CUDA warps are 32) or the trace's runtime calls are hip* ones. The sm-tag
arch-mismatch rule applies only to CUDA.

`limits` keeps the trace's own numbers (`sharedMemPerBlockOptin`, `numSms`, `totalGlobalMem`, ...):
later code uses them over hardware/gpus.py's tables (`hardware.card.of_trace` sizes flex's kernel
options by `sharedMemPerBlockOptin`). This module is the one reader of a trace's device properties:
`device_record` (the device most kernels ran on, for the kernel table) and `used_devices` (every device
the kernels ran on, for the card).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.trace.read import DEVICE_CATS, Trace

LIMIT_KEYS = (
    "totalGlobalMem",
    "numSms",
    "sharedMemPerBlock",
    "sharedMemPerBlockOptin",
    "sharedMemPerMultiprocessor",
    "maxSharedMemoryPerMultiProcessor",
    "regsPerBlock",
    "regsPerMultiprocessor",
    "warpSize",
    "maxThreadsPerBlock",
    "maxThreadsPerMultiprocessor",
)
# Kineto before PyTorch 1.10 wrote `computeProperties` with CUDA's own field names
OLD_KEYS = {"major": "computeMajor", "minor": "computeMinor", "multiProcessorCount": "numSms"}
_AMD_NAME = re.compile(r"\b(amd|radeon|instinct)\b", re.I)
# AMD Instinct parts by the name HIP reports -> their gfx architecture (AMD's ROCm hardware
# specifications table); the first match wins, so the longer names come first
INSTINCT_ARCH = (
    (re.compile(r"\bmi3(50|55)x?\b", re.I), "gfx950"),
    (re.compile(r"\bmi3(00|25)[ax]?\b", re.I), "gfx942"),
    (re.compile(r"\bmi2(10|50|50x)\b", re.I), "gfx90a"),
    (re.compile(r"\bmi100\b", re.I), "gfx908"),
)
_GFX = re.compile(r"gfx[0-9a-f]+", re.I)


def _entry(props: Any, events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The deviceProperties entry of the device most kernels ran on (the first entry otherwise)."""
    if not isinstance(props, list):
        return None
    entries = [p for p in props if isinstance(p, dict)]
    if not entries:
        return None
    used = Counter(e["args"].get("device") for e in events if isinstance(e.get("args"), dict))
    for dev, _ in used.most_common():
        match = next((p for p in entries if p.get("id") == dev), None)
        if match is not None:
            return match
    return entries[0]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def device_record(trace: Trace, events: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The trace's entry for the device most kernels ran on (of `events`, the trace's own when not
    given), from `deviceProperties` or the older `computeProperties` (its CUDA field names mapped to
    today's); None when the trace has neither."""
    meta = trace.meta
    dev = _entry(
        meta.get("deviceProperties") or meta.get("computeProperties"),
        trace.events if events is None else events,
    )
    return None if dev is None else {OLD_KEYS.get(k, k): v for k, v in dev.items()}


def platform_of(trace: Trace, dev: dict[str, Any] | None) -> str:
    """The platform, "cuda" | "rocm", from the device record or the trace's runtime rows; "device" for
    device rows with neither; "cpu" for a trace without device rows."""
    runtime = trace.runtime
    if dev is not None:
        name = str(dev.get("name", "?"))
        amd = bool(dev.get("gcnArchName")) or bool(_AMD_NAME.search(name)) or dev.get("warpSize") == 64
        return "rocm" if amd or runtime == "hip" else "cuda"
    if runtime in ("cuda", "hip"):
        return "rocm" if runtime == "hip" else "cuda"
    on_device = any(str(e.get("cat", "")).lower() in DEVICE_CATS for e in trace.events if isinstance(e, dict))
    return "device" if on_device else "cpu"


_NO_PROPS = {
    "cuda": "CUDA device, properties not recorded in the trace",
    "rocm": "ROCm device, properties not recorded in the trace",
    "device": "a device (kernel rows), its platform and properties not recorded in the trace",
}


def device_info(trace: Trace, source: str) -> dict[str, Any]:
    """What the table says about the device: platform ("cuda" | "rocm" | "cpu"), arch, a one-line
    description, the trace's limits, and (CUDA only) computeMajor/computeMinor. Without device
    properties the platform comes from the device and runtime rows; "CPU only" only without device rows."""
    dev = device_record(trace)
    if dev is None:
        platform = platform_of(trace, None) if source == "device" else "cpu"
        if platform == "cpu":
            why = "no deviceProperties in the trace and no device rows"
            return {"platform": "cpu", "description": f"CPU only ({why})"}
        return {"platform": None if platform == "device" else platform, "description": _NO_PROPS[platform]}
    name = str(dev.get("name", "?"))
    major, minor = dev.get("computeMajor"), dev.get("computeMinor")
    gcn = dev.get("gcnArchName")
    rocm = platform_of(trace, dev) == "rocm"
    out: dict[str, Any] = {"name": name, "id": dev.get("id")}
    out["limits"] = {k: dev[k] for k in LIMIT_KEYS if _is_int(dev.get(k))}
    if rocm:
        m = _GFX.search(str(gcn or ""))
        by_name = next((arch for pattern, arch in INSTINCT_ARCH if pattern.search(name)), None)
        out["platform"] = "rocm"
        out["arch"] = m.group(0).lower() if m else by_name
        out["arch_source"] = (
            "gcnArchName" if m else ("the device name (AMD's ROCm hardware table)" if by_name else None)
        )
        out["hip_version_major_minor"] = f"{major}.{minor}" if _is_int(major) else None
        family = f"gfx{major}" if _is_int(major) else "gfx?"
        arch = out["arch"] or (
            f"{family} family: the trace gives no gcnArchName, and HIP's {major}.{minor} does not say which"
        )
        out["description"] = f"{name} (ROCm, {arch})"
    else:
        out["platform"] = "cuda"
        if _is_int(major) and _is_int(minor):
            out.update(computeMajor=major, computeMinor=minor, arch=f"sm{major}{minor}")
            out["description"] = f"{name} (compute capability {major}.{minor})"
        else:
            out["arch"] = None
            out["description"] = f"{name} (compute capability not in the trace)"
    return out


def printable(text: object) -> str:
    """A name from a file, safe to print: control characters (an ANSI escape) dropped."""
    return "".join(c for c in str(text) if c.isprintable())


def used_devices(trace: Trace, where: str) -> list[dict[str, Any]]:
    """The deviceProperties entries (today's field names) of the devices the trace's kernels ran on
    (every entry when no kernel row names its device); refused when a kernel's device has no entry, when
    one id is listed twice, or when nothing is CUDA."""
    info = device_info(trace, "device")
    if info.get("platform") != "cuda":
        raise TuneproofError(
            f"{{trace}} {where}: {printable(info['description'])}: no CUDA compute capability to explain for",
            "give a trace recorded on a CUDA device, or name the card",
            fields=("trace",),
        )
    raw = trace.meta.get("deviceProperties") or trace.meta.get("computeProperties") or []
    listed = [e for e in raw if isinstance(e, dict)]
    entries: dict[str, dict[str, Any]] = {
        str(e.get("id")): {OLD_KEYS.get(str(k), str(k)): v for k, v in e.items()} for e in listed
    }
    if len(entries) < len(listed):
        raise TuneproofError(
            f"{{trace}} {where}: its deviceProperties list one device id twice: which card ran what is "
            "unknown",
            "give the trace torch.profiler wrote, or name the card ({gpu})",
            fields=("trace", "gpu"),
        )
    used = {  # kernel rows that name their device ("0" and 0 alike)
        str(e["args"]["device"])
        for e in trace.events
        if str(e.get("cat", "")).lower() == "kernel"
        and isinstance(e.get("args"), dict)
        and e["args"].get("device") is not None
    }
    missing = sorted(d for d in used if d not in entries)
    if missing:
        raise TuneproofError(
            f"{{trace}} {where}: kernels ran on device {', '.join(missing)}, which its deviceProperties do "
            "not describe",
            "give a trace whose deviceProperties list every device it ran on, or name the card ({gpu})",
            fields=("trace", "gpu"),
        )
    return [entries[d] for d in sorted(used)] if used else list(entries.values())
