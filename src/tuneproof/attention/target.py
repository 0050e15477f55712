"""The CUDA device an explanation is for, and the per-block shared memory flex's kernel options must fit:
from a capability (the limit from the capability table), a GPU name (its row's limit), "auto" (what
torch reports for this device) or a profiler trace (the `sharedMemPerBlockOptin` Kineto recorded from
cudaGetDeviceProperties on the card the run used).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuneproof.errors import TuneproofError


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
    """At most one of a capability ('9.0', 'sm_90'), a GPU name or "auto", and a trace; none: the CPU."""
    given = [
        name for name, v in (("capability", capability), ("gpu", gpu), ("trace", trace)) if v is not None
    ]
    if len(given) > 1:
        raise TuneproofError(
            " and ".join(f"{{{g}}}" for g in given) + " together", "give one of them", fields=tuple(given)
        )
    if capability is not None:
        from tuneproof.attention.dispatch import parse_capability

        return DeviceTarget(parse_capability(capability))
    if gpu is not None:
        return _gpu_target(gpu)
    if trace is not None:
        return trace_target(trace)
    return DeviceTarget()


def _gpu_target(gpu: str) -> DeviceTarget:
    from tuneproof.hardware import AUTO, _normalise_name, capability_of, device_smem_limit, lookup_gpu

    capability = capability_of(gpu)  # refuses ROCm and unknown names
    if _normalise_name(gpu) == AUTO:
        smem = device_smem_limit()  # None where torch lacks the field: the capability's table stands
        return DeviceTarget(
            capability, smem, "this device: torch's shared_memory_per_block_optin" if smem else None
        )
    row = lookup_gpu(gpu)
    return DeviceTarget(capability, row.smem_per_block_optin, f"the {row.name} row of the GPU table")


def trace_target(trace: Path) -> DeviceTarget:
    """The device a torch.profiler trace ran on: its compute capability and `sharedMemPerBlockOptin`.
    A trace from a ROCm device, or one without CUDA device properties, is refused with the reason."""
    from tuneproof.attention.dispatch import parse_capability
    from tuneproof.measure.kernels import load_trace
    from tuneproof.measure.trace_device import device_info, smem_limit_bytes

    data = load_trace(trace)
    info = device_info(data, data["traceEvents"], "device")
    where = f"{trace.name}"
    if info.get("platform") != "cuda" or "computeMajor" not in info:
        raise TuneproofError(
            f"{{trace}} {where}: {info['description']}: no CUDA compute capability to explain for",
            "give a trace recorded on a CUDA device, or name the card",
            fields=("trace",),
        )
    try:
        capability = parse_capability(f"{info['computeMajor']}.{info['computeMinor']}")
    except TuneproofError:
        from tuneproof.attention import rules

        known = ", ".join(f"{a}.{b}" for a, b in rules.KNOWN_CAPABILITIES)
        raise TuneproofError(
            f"{{trace}} {where} ran on {info['description']}, a capability tuneproof has no rules for",
            f"explain for one it has instead ({{capability}}: {known})",
            fields=("trace", "capability"),
        ) from None
    smem = smem_limit_bytes(info)
    if smem is None:
        return DeviceTarget(capability)
    return DeviceTarget(capability, smem, f"trace {where}, {info['name']}: sharedMemPerBlockOptin")
