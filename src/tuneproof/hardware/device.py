"""What torch reports about this machine's CUDA (or ROCm) device: its name, compute capability and
per-block opt-in shared memory. `tuneproof.hardware.gpus` reads these for `gpu="auto"`; a profiler trace
records the same limit as `sharedMemPerBlockOptin` (`tuneproof.attention.target.trace_target`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.core.errors import TuneproofError


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """What torch reports about a CUDA (or ROCm) device."""

    name: str
    capability: tuple[int, int] | None  # None on ROCm, whose (major, minor) is not a CUDA capability
    smem_per_block_optin: int | None  # `shared_memory_per_block_optin`; None where torch has no field


def device_facts(index: int = 0) -> DeviceFacts:
    """Name, capability and per-block opt-in shared memory of CUDA device `index`, as torch reports them;
    a `TuneproofError` where torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        raise TuneproofError(
            "{gpu} auto needs a CUDA device; torch sees none here", "name the GPU, e.g. H100", fields=("gpu",)
        )
    rocm = getattr(torch.version, "hip", None) is not None
    capability = None if rocm else tuple(torch.cuda.get_device_capability(index))
    return DeviceFacts(
        torch.cuda.get_device_name(index),
        (capability[0], capability[1]) if capability else None,
        device_smem_limit(index),
    )


def device_smem_limit(index: int = 0) -> int | None:
    """`torch.cuda.get_device_properties(index).shared_memory_per_block_optin` in bytes (what Triton
    compares a kernel's shared memory against); None without CUDA or where torch lacks the field. A
    profiler trace records the same number as `sharedMemPerBlockOptin`
    (`tuneproof.attention.target.trace_target`)."""
    import torch

    if not torch.cuda.is_available():
        return None
    value = getattr(torch.cuda.get_device_properties(index), "shared_memory_per_block_optin", None)
    return int(value) if isinstance(value, int) and value > 0 else None
