"""The CUDA device an explanation is for, and the per-block shared memory flex's kernel options must fit:
from a capability (the limit from the capability table), a GPU name (its row's limit), "auto" (what
torch reports for this device) or a profiler trace (the `sharedMemPerBlockOptin` Kineto recorded from
cudaGetDeviceProperties on the card the run used).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.capability import (
    CAPABILITY_TEXT,
    SMEM_FLOOR,
    known_text,
    parse_capability,
    smem_limit,
)
from tuneproof.trace.read import Trace


@dataclass(frozen=True, slots=True)
class DeviceTarget:
    """A capability (None: the CPU) and, where the source gives one, the device's shared-memory limit."""

    capability: tuple[int, int] | None = None
    smem_limit: int | None = None  # bytes per block (opt-in); None: the capability table's
    smem_source: str | None = None  # where smem_limit came from, for the output

    @property
    def limit_note(self) -> str | None:
        """'shared memory per block: 232,448 B (trace x.json: sharedMemPerBlockOptin)'."""
        if self.smem_limit is None:
            return None
        return f"shared memory per block: {self.smem_limit:,} B ({self.smem_source})"


def device_target(capability: str | None, gpu: str | None, trace: Path | None = None) -> DeviceTarget:
    """At most one of a capability ('9.0', 'sm_90'), a GPU name, "auto" or a capability written as a
    GPU, and a trace; none: the CPU. Every CUDA target carries the limit flex's options must fit, and
    where it came from."""
    sources = (("capability", capability), ("gpu", gpu), ("trace", trace))
    given = [name for name, v in sources if v is not None]
    if len(given) > 1:
        raise TuneproofError(
            " and ".join(f"{{{g}}}" for g in given) + " together", "give one of them", fields=tuple(given)
        )
    if gpu is not None and not gpu.strip():
        raise TuneproofError(
            "{gpu} is empty", "name the card, e.g. H100, or its capability, e.g. 9.0", fields=("gpu",)
        )
    if gpu is not None and CAPABILITY_TEXT.fullmatch(gpu):  # a capability given as the card
        try:
            return table_target(parse_capability(gpu))
        except TuneproofError as e:
            raise TuneproofError(e.what.replace("{capability}", "{gpu}"), e.hint, fields=("gpu",)) from None
    if capability is not None:
        return table_target(parse_capability(capability))
    if gpu is not None:
        return _gpu_target(gpu)
    if trace is not None:
        from tuneproof.trace.read import load_trace

        return trace_target(load_trace(trace))
    return DeviceTarget()


def table_target(capability: tuple[int, int], why: str = "") -> DeviceTarget:
    """The capability's limit from the table (`kernel_options.smem_limit`), `why` saying why not the
    device's own; a capability the table lacks keeps no limit (the chooser then refuses it)."""
    try:
        limit = smem_limit(capability)
    except TuneproofError:
        return DeviceTarget(capability)
    return DeviceTarget(capability, limit, f"the capability {capability[0]}.{capability[1]} table{why}")


def _gpu_target(gpu: str) -> DeviceTarget:
    from tuneproof.hardware.gpus import AUTO, capability_of, device_smem_limit, lookup_gpu, normalise_name

    capability = capability_of(gpu)  # refuses ROCm and unknown names
    if normalise_name(gpu) == AUTO:
        smem = device_smem_limit()  # None where torch lacks the field: the capability's table stands
        if smem is None:
            return table_target(
                capability, "; torch reports no shared_memory_per_block_optin for this device"
            )
        return DeviceTarget(capability, smem, "this device: torch's shared_memory_per_block_optin")
    row = lookup_gpu(gpu)
    return DeviceTarget(capability, row.smem_per_block_optin, f"the {row.name} row of the GPU table")


def _printable(text: object) -> str:
    """A name from a file, safe to print: control characters (an ANSI escape) dropped."""
    return "".join(c for c in str(text) if c.isprintable())


def trace_target(trace: Trace) -> DeviceTarget:
    """The device a torch.profiler trace ran its kernels on: its compute capability and
    `sharedMemPerBlockOptin`. A ROCm or CPU-only trace, kernels on a device its deviceProperties do not
    describe, and kernels on cards of different capabilities are refused with the reason; cards of one
    capability with different limits give the smallest; no valid limit, the capability's table."""
    name = Path(trace.source).name
    entries = _used_entries(trace, name)
    capabilities = sorted({_trace_capability(e, name) for e in entries})
    if len(capabilities) > 1:
        shown = " and ".join(f"{a}.{b}" for a, b in capabilities)
        raise TuneproofError(
            f"{{trace}} {name} ran kernels on devices of capability {shown}: one explanation cannot "
            "hold for both",
            "give one rank's trace, or name the card ({gpu})",
            fields=("trace", "gpu"),
        )
    capability = capabilities[0]
    table = table_target(capability).smem_limit or 1 << 18
    limits: dict[Any, Any] = {e.get("id"): e.get("sharedMemPerBlockOptin") for e in entries}
    bad = {
        k: v
        for k, v in limits.items()
        if isinstance(v, bool) or not isinstance(v, int) or not SMEM_FLOOR <= v <= table
    }
    if bad:
        shown = ", ".join(f"device {k}: {v!r}" for k, v in bad.items())
        valid = f"valid: {SMEM_FLOOR:,} to {table:,} B"
        return table_target(
            capability, f"; the trace gives no valid sharedMemPerBlockOptin ({shown}; {valid})"
        )
    smem = min(limits.values())
    names = sorted({_printable(e.get("name", "?")) for e in entries})
    several = (
        f" (the smallest of devices {', '.join(str(k) for k in limits)})"
        if len(set(limits.values())) > 1
        else ""
    )
    return DeviceTarget(
        capability, smem, f"trace {name}, {', '.join(names)}: sharedMemPerBlockOptin{several}"
    )


def _used_entries(trace: Trace, where: str) -> list[dict[str, Any]]:
    """The deviceProperties entries of the devices the trace's kernels ran on (every entry when no
    kernel row names its device); refused when a kernel's device has no entry, or nothing is CUDA."""
    from tuneproof.trace.devices import OLD_KEYS, device_info

    info = device_info(trace, "device")
    if info.get("platform") != "cuda":
        raise TuneproofError(
            f"{{trace}} {where}: {_printable(info['description'])}: no CUDA compute capability to "
            "explain for",
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


def _trace_capability(entry: dict[str, Any], where: str) -> tuple[int, int]:
    major, minor = entry.get("computeMajor"), entry.get("computeMinor")
    name = _printable(entry.get("name", "a device"))
    ints = all(isinstance(x, int) and not isinstance(x, bool) for x in (major, minor))
    if not ints:
        raise TuneproofError(
            f"{{trace}} {where}: {name} has computeMajor {major!r}, computeMinor {minor!r}: not a compute "
            "capability",
            "give a trace written by torch.profiler, or name the card ({gpu})",
            fields=("trace", "gpu"),
        )
    try:
        return parse_capability(f"{major}.{minor}")
    except TuneproofError:
        known = known_text()
        raise TuneproofError(
            f"{{trace}} {where} ran on {name} (compute capability {major}.{minor}), a capability tuneproof "
            "has no rules for",
            f"explain for one it has instead ({{capability}}: {known})",
            fields=("trace", "capability"),
        ) from None
