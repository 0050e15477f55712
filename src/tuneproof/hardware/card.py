"""The card a run is for, as one `Card`: its table row (peaks, datasheet), compute capability, per-block
shared memory and memory, each with where it came from, resolved once from what the user gives: a GPU
name (the table's row), `auto` (this machine's device, as torch reports it), a capability ("9.0",
"sm_90": the capability's table, no memory) or a profiler trace (the `deviceProperties` Kineto recorded
on the card the run used). Nothing given is the CPU.

Every consumer reads the card it is handed: the dispatch explainer and flex's kernel options its
capability and shared memory, the memory ledger its memory, the MFU its row's peak.

A datasheet's "80 GB" of HBM is 80 GiB of chips; the driver keeps some for itself, so torch reports a
little less (an H100 80GB: 79.2 GiB in `torch.cuda.get_device_properties(0).total_memory`). The table
gives the datasheet figure and says so; `auto` gives the device's own total.
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
from tuneproof.hardware.gpus import AUTO, GpuSpec, capability_of, match_gpu, normalise_name
from tuneproof.trace.devices import printable

GIB = 1 << 30


@dataclass(kw_only=True, frozen=True, slots=True)
class Card:
    """One card. `capability` None: the CPU (or a ROCm GPU); `smem_limit` None: the capability's table
    has none; `total_bytes` None: its memory is not known, `memory_source` says why."""

    name: str | None = None  # the table row's name, the device's own name, or None (a capability, the CPU)
    row: GpuSpec | None = None  # the GPU table's row: peaks and their datasheets
    note: str | None = None  # the variant a family name was assumed to mean ("H100 -> H100 SXM ...")
    capability: tuple[int, int] | None = None
    smem_limit: int | None = None  # bytes per block (opt-in)
    smem_source: str | None = None
    total_bytes: int | None = None
    memory_source: str | None = None
    memory_hint: str = "name the card, or give {gpu_memory} in GiB"  # what to give when the memory is unknown

    @property
    def limit_note(self) -> str | None:
        """'shared memory per block: 232,448 B (trace x.json: sharedMemPerBlockOptin)'."""
        if self.smem_limit is None:
            return None
        return f"shared memory per block: {self.smem_limit:,} B ({self.smem_source})"

    def memory(self) -> int:
        """The card's bytes; refused, saying why, where they are not known."""
        if self.total_bytes is None:
            raise TuneproofError(
                self.memory_source or f"{self.name or 'the card'}: its memory is not known",
                self.memory_hint,
                fields=("gpu", "gpu_memory"),
            )
        return self.total_bytes


CPU = Card(memory_source="the CPU: no card named")


def card(
    gpu: str | None = None,
    *,
    capability: str | None = None,
    trace: Path | Any = None,
    memory_gib: float | None = None,
) -> Card:
    """The card from at most one of a capability ('9.0', 'sm_90'), a GPU name or "auto" (a capability
    written as the GPU counts as a capability) and a trace (a path, or a `Trace` already read); none: the
    CPU. `memory_gib` gives the memory a card's table has not (or a card that is nothing but memory)."""
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
            found = of_capability(parse_capability(gpu))
        except TuneproofError as e:
            raise TuneproofError(e.what.replace("{capability}", "{gpu}"), e.hint, fields=("gpu",)) from None
    elif capability is not None:
        found = of_capability(parse_capability(capability))
    elif gpu is not None:
        found = _named(gpu)
    elif trace is not None:
        from tuneproof.trace.read import Trace, load_trace

        found = of_trace(trace if isinstance(trace, Trace) else load_trace(Path(trace)))
    else:
        found = CPU
    if memory_gib is None:
        return found
    from dataclasses import replace

    return replace(
        found,
        name=gpu or "the card",  # the card as the user named it, with the memory they gave
        total_bytes=round(memory_gib * GIB),
        memory_source=f"{memory_gib:g} GiB as given",
    )


def of_capability(capability: tuple[int, int], why: str = "") -> Card:
    """A capability alone: its shared memory from the capability table (`why` saying why not the device's
    own); one the table lacks keeps no limit (flex's chooser then refuses it); no memory."""
    try:
        limit: int | None = smem_limit(capability)
    except TuneproofError:
        limit = None
    source = f"the capability {capability[0]}.{capability[1]} table{why}" if limit is not None else None
    return Card(
        capability=capability,
        smem_limit=limit,
        smem_source=source,
        memory_source=f"a capability ({capability[0]}.{capability[1]}) names no card with its memory",
    )


def _named(gpu: str) -> Card:
    """A table row by any of its names, or "auto" (this device); a ROCm GPU is refused (no CUDA
    capability to explain for)."""
    capability = capability_of(gpu)
    if normalise_name(gpu) == AUTO:
        return _this_device(capability)
    found = match_gpu(gpu)
    row = found.gpu
    name, total, source, hint = _capacity(row, gpu)
    return Card(
        name=name,
        memory_hint=hint,
        row=row,
        note=found.note,
        capability=capability,
        smem_limit=row.smem_per_block_optin,
        smem_source=f"the {row.name} row of the GPU table",
        total_bytes=total,
        memory_source=source,
    )


def _capacity(row: GpuSpec, asked: str) -> tuple[str, int | None, str, str]:
    """(the card's name, its bytes, their source, what to give where they are unknown): the row's one
    size, or the size its name says where it ships in several ("A100 80GB"); None where it does not say."""
    sizes = row.memory_gib
    if len(sizes) == 1:
        return (
            row.name,
            sizes[0] * GIB,
            row.memory_source + " (datasheet; the driver reports a little less)",
            "",
        )
    named = [size for size in sizes if f"{size}gb" in asked.lower().replace(" ", "").replace("-", "")]
    if len(named) == 1:
        return f"{row.name} {named[0]}GB", named[0] * GIB, row.memory_source, ""
    return (
        row.name,
        None,
        f"the {row.name} ships with {' or '.join(f'{s} GB' for s in sizes)}",
        f"name the size, e.g. '{row.name} {sizes[-1]}GB', or give {{gpu_memory}} in GiB",
    )


def _this_device(capability: tuple[int, int]) -> Card:
    """This machine's CUDA device: the row its name picks (for the peaks; none for a device the table
    lacks), and its own capability, shared memory and memory as torch reports them."""
    import torch

    from tuneproof.hardware.device import device_smem_limit

    name = torch.cuda.get_device_name(0)
    total = getattr(torch.cuda.get_device_properties(0), "total_memory", None)
    try:
        found = match_gpu(AUTO)
        row, note = found.gpu, found.note
    except TuneproofError:
        row, note = None, None
    smem = device_smem_limit()
    if smem is None:
        own = of_capability(capability, "; torch reports no shared_memory_per_block_optin for this device")
    else:
        own = Card(smem_limit=smem, smem_source="this device: torch's shared_memory_per_block_optin")
    return Card(
        name=name,
        row=row,
        note=note,
        capability=capability,
        smem_limit=own.smem_limit,
        smem_source=own.smem_source,
        total_bytes=int(total) if isinstance(total, int) else None,
        memory_source="this device: torch's total_memory"
        if isinstance(total, int)
        else "torch reports no total_memory for this device",
    )


def of_trace(trace: Any) -> Card:
    """The card a torch.profiler trace ran its kernels on: its compute capability and
    `sharedMemPerBlockOptin` (and its `totalGlobalMem`). A ROCm or CPU-only trace, kernels on a device its
    deviceProperties do not describe, and kernels on cards of different capabilities are refused with the
    reason; cards of one capability with different limits give the smallest; no valid limit, the
    capability's table."""
    from tuneproof.trace.devices import used_devices

    name = Path(trace.source).name
    entries = used_devices(trace, name)
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
    table = of_capability(capability).smem_limit or 1 << 18
    limits: dict[Any, Any] = {e.get("id"): e.get("sharedMemPerBlockOptin") for e in entries}
    memory = [m for e in entries if isinstance(m := e.get("totalGlobalMem"), int) and m > 0]
    total = min(memory) if len(memory) == len(entries) else None
    names = ", ".join(sorted({printable(e.get("name", "?")) for e in entries}))
    source = f"trace {name}: totalGlobalMem" if total else f"trace {name} records no totalGlobalMem"
    bad = {
        k: v
        for k, v in limits.items()
        if isinstance(v, bool) or not isinstance(v, int) or not SMEM_FLOOR <= v <= table
    }
    if bad:
        shown = ", ".join(f"device {k}: {v!r}" for k, v in bad.items())
        valid = f"valid: {SMEM_FLOOR:,} to {table:,} B"
        fallback = of_capability(
            capability, f"; the trace gives no valid sharedMemPerBlockOptin ({shown}; {valid})"
        )
        limit, smem_source = fallback.smem_limit, fallback.smem_source
    else:
        several = (
            f" (the smallest of devices {', '.join(str(k) for k in limits)})"
            if len(set(limits.values())) > 1
            else ""
        )
        limit, smem_source = min(limits.values()), f"trace {name}, {names}: sharedMemPerBlockOptin{several}"
    return Card(
        name=names,
        capability=capability,
        smem_limit=limit,
        smem_source=smem_source,
        total_bytes=total,
        memory_source=source,
    )


def _trace_capability(entry: dict[str, Any], where: str) -> tuple[int, int]:
    major, minor = entry.get("computeMajor"), entry.get("computeMinor")
    name = printable(entry.get("name", "a device"))
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
        raise TuneproofError(
            f"{{trace}} {where} ran on {name} (compute capability {major}.{minor}), a capability tuneproof "
            "has no rules for",
            f"explain for one it has instead ({{capability}}: {known_text()})",
            fields=("trace", "capability"),
        ) from None
