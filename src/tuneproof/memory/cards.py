"""How much memory a card has, for `tuneproof memory --gpu`: the rows of `tuneproof.hardware.gpus`,
each with its datasheet capacity, or this machine's device as torch reports it ("auto").

A datasheet's "80 GB" of HBM is 80 GiB of chips; the driver keeps some for itself, so torch reports a
little less (an H100 80GB: 79.2 GiB in `torch.cuda.get_device_properties(0).total_memory`). The table
gives the datasheet figure and says so; "auto" gives the device's own total.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.core.errors import TuneproofError

GIB = 1 << 30

# GPU table row name -> capacities in GiB (several where the card ships in several sizes), the source
CAPACITY: dict[str, tuple[tuple[int, ...], str]] = {
    "H100 PCIe": ((80,), "NVIDIA H100 datasheet, PCIe column: 80 GB HBM2e"),
    "H100 NVL": ((94,), "NVIDIA H100 datasheet, NVL column: 94 GB HBM3"),
    "H100 SXM": ((80,), "NVIDIA H100 datasheet, SXM column: 80 GB HBM3"),
    "GH200": ((96, 144), "NVIDIA GH200 datasheet: 96 GB HBM3 or 144 GB HBM3e"),
    "H200 NVL": ((141,), "NVIDIA H200 datasheet: 141 GB HBM3e"),
    "H200 SXM": ((141,), "NVIDIA H200 datasheet: 141 GB HBM3e"),
    "GB200": ((186,), "NVIDIA GB200 NVL72 datasheet: 13.4 TB HBM3e over 72 GPUs"),
    "B200": ((180,), "NVIDIA DGX B200 datasheet: 1,440 GB over 8 GPUs"),
    "RTX PRO 6000 Blackwell Max-Q": ((96,), "NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7"),
    "RTX PRO 6000 Blackwell": ((96,), "NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7"),
    "RTX 5090": ((32,), "NVIDIA GeForce RTX 5090 specifications: 32 GB GDDR7"),
    "RTX 4090": ((24,), "NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X"),
    "L40S": ((48,), "NVIDIA L40S datasheet: 48 GB GDDR6"),
    "L4": ((24,), "NVIDIA L4 datasheet: 24 GB GDDR6"),
    "A10G": ((24,), "AWS G5 instance specifications: 24 GB per A10G"),
    "A10": ((24,), "NVIDIA A10 datasheet: 24 GB GDDR6"),
    "A100": ((40, 80), "NVIDIA A100 datasheet: 40 GB HBM2 or 80 GB HBM2e"),
    "T4": ((16,), "NVIDIA T4 datasheet: 16 GB GDDR6"),
    "V100 PCIe": ((16, 32), "NVIDIA V100 datasheet: 16 or 32 GB HBM2"),
    "V100 SXM2": ((16, 32), "NVIDIA V100 datasheet: 16 or 32 GB HBM2"),
    "MI300X": ((192,), "AMD Instinct MI300X data sheet: 192 GB HBM3"),
}


@dataclass(frozen=True, slots=True)
class Card:
    """A card's name, the bytes it holds, and where that figure comes from."""

    name: str
    total_bytes: int
    source: str


def card(gpu: str, memory_gib: float | None = None) -> Card:
    """The card `gpu` names (a table row by any of its names, or "auto"), with its capacity: the
    table's, the one its name says where it ships in several sizes ("A100 80GB"), or `memory_gib`."""
    from tuneproof.hardware.gpus import AUTO, lookup_gpu, normalise_name

    if memory_gib is not None:
        return Card(gpu, round(memory_gib * GIB), f"{memory_gib:g} GiB as given")
    if normalise_name(gpu) == AUTO:
        import torch

        if not torch.cuda.is_available():
            raise TuneproofError(
                "{gpu} auto needs a CUDA device; torch sees none here", "name the GPU, e.g. H100",
                fields=("gpu",),
            )  # fmt: skip
        props = torch.cuda.get_device_properties(0)
        return Card(props.name, int(props.total_memory), "this device: torch's total_memory")
    row = lookup_gpu(gpu, needed_for="its memory")
    sizes, source = CAPACITY[row.name]
    if len(sizes) == 1:
        return Card(row.name, sizes[0] * GIB, source + " (datasheet; the driver reports a little less)")
    named = [size for size in sizes if f"{size}gb" in gpu.lower().replace(" ", "").replace("-", "")]
    if len(named) != 1:
        raise TuneproofError(
            f"the {row.name} ships with {' or '.join(f'{s} GB' for s in sizes)}",
            f"name the size, e.g. '{row.name} {sizes[-1]}GB', or give {{gpu_memory}} in GiB",
            fields=("gpu", "gpu_memory"),
        )
    return Card(f"{row.name} {named[0]}GB", named[0] * GIB, source)
