"""GPU peak table: dense tensor-core throughput per dtype, compute capability, shared memory.

Conventions:
- `peak_tflops` values are DENSE (no 2:4 sparsity) tensor-core TFLOP/s per GPU, at the datasheet
  boost clock. GeForce parts are listed at FP32 accumulate (what BF16 training uses), which is half
  their FP16-accumulate rate.
- `smem_per_block_optin` is `cudaDevAttrMaxSharedMemoryPerBlockOptin` in bytes: the limit Triton
  compares a kernel's shared memory against.
- Every row carries its source. Public tables disagree (the vendors' datasheets against secondary
  tables); where they do, the row says so in `note`.
- An unknown GPU or dtype gives no peak, never a fallback: `lookup_gpu` raises, `Peak.for_dtype`
  returns None with the reason (a row's `absent` says why a dtype has none, e.g. no BF16 tensor cores).
- A family name ("H100") fits its generic row only by assumption: `match_gpu` names the variant it
  assumed and the others, and that note travels in the peak's source.
- "auto" is this machine's CUDA device: its name picks the row, and its own capability and
  `shared_memory_per_block_optin` replace the table's.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tuneproof.core.dtypes import check_dtype, normalise_dtype
from tuneproof.core.errors import TuneproofError
from tuneproof.hardware.capability import (  # the shared-memory limits the rows take
    LDS_GFX942,
    SMEM_SM70,
    SMEM_SM75,
    SMEM_SM80,
    SMEM_SM86_89_120,
    SMEM_SM90_100,
)
from tuneproof.hardware.device import device_facts as device_facts
from tuneproof.hardware.device import device_smem_limit as device_smem_limit


@dataclass(kw_only=True, frozen=True, slots=True)
class GpuSpec:
    """One GPU model. `peak_tflops` maps dtype name -> dense TFLOP/s."""

    name: str
    aliases: tuple[str, ...]  # lower-case substrings of torch/nvidia-smi device names
    capability: tuple[int, int] | None  # CUDA compute capability; None for a ROCm GPU
    smem_per_block_optin: int
    peak_tflops: dict[str, float]
    source: str
    note: str | None = None
    absent: dict[str, str] = field(default_factory=dict)  # dtype -> why the table has no peak for it
    memory_gib: tuple[int, ...] = ()  # the datasheet's memory in GiB (several where it ships in several)
    memory_source: str = ""  # the datasheet the memory comes from


# Ordering rule: more specific names first (an "h100 pcie" must match before "h100"); the first row
# whose alias stands as whole words in the normalised device name wins, so "a10" never matches
# "a100" or "a10g", nor "l4" "l40s". A row matched only by an alias that is part of another row's
# alias ("h100" in "h100 pcie") is an assumption, reported as such by `match_gpu`.
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec(
        name="H100 PCIe",
        aliases=("h100 pcie", "h100 80gb hbm2e"),
        capability=(9, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 756.0, "fp16": 756.0, "fp8": 1513.0},
        source="NVIDIA H100 datasheet (PCIe column, dense = sparse/2); torchtitan tools/utils.py "
        "get_peak_flops",
        memory_gib=(80,),
        memory_source="NVIDIA H100 datasheet, PCIe column: 80 GB HBM2e",
    ),
    GpuSpec(
        name="H100 NVL",
        aliases=("h100 nvl",),
        capability=(9, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 835.0, "fp16": 835.0, "fp8": 1670.0},
        source="torchtitan tools/utils.py get_peak_flops (835e12)",
        note="Lightning lists 1978.8 for H100 NVL: a sparse or pair figure; not used",
        memory_gib=(94,),
        memory_source="NVIDIA H100 datasheet, NVL column: 94 GB HBM3",
    ),
    GpuSpec(
        name="H100 SXM",
        aliases=("h100 sxm", "h100 80gb hbm3", "h100"),
        capability=(9, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
        source="NVIDIA H100 datasheet (SXM column); torchtitan get_peak_flops; torchao roofline_utils",
        memory_gib=(80,),
        memory_source="NVIDIA H100 datasheet, SXM column: 80 GB HBM3",
    ),
    GpuSpec(
        name="GH200",
        aliases=("gh200",),
        capability=(9, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
        source="NVIDIA GH200 datasheet (same Hopper die and clocks as H100 SXM)",
        memory_gib=(96, 144),
        memory_source="NVIDIA GH200 datasheet: 96 GB HBM3 or 144 GB HBM3e",
    ),
    GpuSpec(
        name="H200 NVL",
        aliases=("h200 nvl",),
        capability=(9, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 835.0, "fp16": 835.0, "fp8": 1670.0},
        source="NVIDIA H200 datasheet (NVL column); nanochat get_peak_flops (836e12)",
        memory_gib=(141,),
        memory_source="NVIDIA H200 datasheet: 141 GB HBM3e",
    ),
    GpuSpec(
        name="H200 SXM",
        aliases=("h200 sxm", "nvidia h200", "h200"),
        capability=(9, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
        source="NVIDIA H200 datasheet (SXM column); torchtitan get_peak_flops",
        memory_gib=(141,),
        memory_source="NVIDIA H200 datasheet: 141 GB HBM3e",
    ),
    GpuSpec(
        name="GB200",
        aliases=("gb200",),
        capability=(10, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 2500.0, "fp16": 2500.0, "fp8": 5000.0, "fp4": 10000.0},
        source="NVIDIA DGX GB200 page (5 PF sparse BF16 per GPU); torchtitan, nanochat, verl",
        note="contested: NVIDIA's DGX GB200 page (via torchtitan) says 2,500 dense BF16 per GPU; torchao "
        "lists 2250 (the B200 figure); NVL72 totals support 2500",
        memory_gib=(186,),
        memory_source="NVIDIA GB200 NVL72 datasheet: 13.4 TB HBM3e over 72 GPUs",
    ),
    GpuSpec(
        name="B200",
        aliases=("b200",),
        capability=(10, 0),
        smem_per_block_optin=SMEM_SM90_100,
        peak_tflops={"bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0, "fp4": 9000.0},
        source="NVIDIA Blackwell architecture technical brief (dense = sparse/2); torchao gpu_name_to_specs",
        memory_gib=(180,),
        memory_source="NVIDIA DGX B200 datasheet: 1,440 GB over 8 GPUs",
    ),
    GpuSpec(
        name="RTX PRO 6000 Blackwell Max-Q",
        aliases=("rtx pro 6000 blackwell max-q",),
        capability=(12, 0),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 438.9, "fp16": 438.9},
        source="RTX Blackwell PRO GPU Architecture v1.1, Table 4 (via NeMo Automodel _DEVICE_FLOPS, PR "
        "#3598)",
        memory_gib=(96,),
        memory_source="NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7",
    ),
    GpuSpec(
        name="RTX PRO 6000 Blackwell",
        aliases=("rtx pro 6000 blackwell workstation", "rtx pro 6000 blackwell"),
        capability=(12, 0),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 503.8, "fp16": 503.8},
        source="RTX Blackwell PRO GPU Architecture v1.1, Table 4 (via NeMo Automodel _DEVICE_FLOPS, PR "
        "#3598)",
        memory_gib=(96,),
        memory_source="NVIDIA RTX PRO 6000 Blackwell datasheet: 96 GB GDDR7",
    ),
    GpuSpec(
        name="RTX 5090",
        aliases=("rtx 5090",),
        capability=(12, 0),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 209.5, "fp16": 209.5, "fp8": 419.0, "fp4": 1676.0},
        source="NVIDIA RTX Blackwell GPU architecture whitepaper (FP32 accumulate); torchao "
        "gpu_name_to_specs",
        memory_gib=(32,),
        memory_source="NVIDIA GeForce RTX 5090 specifications: 32 GB GDDR7",
    ),
    GpuSpec(
        name="RTX 4090",
        aliases=("rtx 4090",),
        capability=(8, 9),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 165.2, "fp16": 165.2, "fp8": 330.3},
        source="NVIDIA Ada Lovelace architecture whitepaper, Appendix A (FP32 accumulate); nanochat",
        note="Lightning lists 82.6 (non-tensor rate) and some tables 330 (FP16 accumulate); not used",
        memory_gib=(24,),
        memory_source="NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X",
    ),
    GpuSpec(
        name="L40S",
        aliases=("l40s",),
        capability=(8, 9),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
        source="NVIDIA L40S datasheet (dense = sparse/2); nanochat, verl _DEVICE_FLOPS",
        memory_gib=(48,),
        memory_source="NVIDIA L40S datasheet: 48 GB GDDR6",
    ),
    GpuSpec(
        name="L4",
        aliases=("l4",),
        capability=(8, 9),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 121.0, "fp16": 121.0, "fp8": 242.0},
        source="NVIDIA L4 datasheet (dense = sparse/2); Lightning _CUDA_FLOPS (Ada whitepaper)",
        memory_gib=(24,),
        memory_source="NVIDIA L4 datasheet: 24 GB GDDR6",
    ),
    GpuSpec(
        name="A10G",
        aliases=("a10g",),
        capability=(8, 6),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 125.0, "fp16": 125.0},
        source="NVIDIA A10 datasheet (Lightning _CUDA_FLOPS['a10g'])",
        note="no NVIDIA A10G datasheet exists; this is the A10 figure, the A10G may run lower clocks",
        memory_gib=(24,),
        memory_source="AWS G5 instance specifications: 24 GB per A10G",
    ),
    GpuSpec(
        name="A10",
        aliases=("a10",),
        capability=(8, 6),
        smem_per_block_optin=SMEM_SM86_89_120,
        peak_tflops={"bf16": 125.0, "fp16": 125.0},
        source="NVIDIA A10 datasheet (BF16/FP16 tensor 125 dense, 250 with sparsity)",
        memory_gib=(24,),
        memory_source="NVIDIA A10 datasheet: 24 GB GDDR6",
    ),
    GpuSpec(
        name="A100",
        aliases=("a100",),
        capability=(8, 0),
        smem_per_block_optin=SMEM_SM80,
        peak_tflops={"bf16": 312.0, "fp16": 312.0, "tf32": 156.0},
        source="NVIDIA A100 datasheet; torchtitan get_peak_flops; Lightning _CUDA_FLOPS",
        memory_gib=(40, 80),
        memory_source="NVIDIA A100 datasheet: 40 GB HBM2 or 80 GB HBM2e",
    ),
    GpuSpec(
        name="T4",
        aliases=("t4",),
        capability=(7, 5),
        smem_per_block_optin=SMEM_SM75,
        peak_tflops={"fp16": 65.0},
        source="NVIDIA T4 datasheet (mixed precision FP16/FP32 tensor 65 TFLOPS)",
        absent={"bf16": "Turing (sm_75) has no BF16 tensor cores: the T4 datasheet lists FP16, INT8, INT4"},
        memory_gib=(16,),
        memory_source="NVIDIA T4 datasheet: 16 GB GDDR6",
    ),
    GpuSpec(
        name="V100 PCIe",
        aliases=("v100 pcie",),
        capability=(7, 0),
        smem_per_block_optin=SMEM_SM70,
        peak_tflops={"fp16": 112.0},
        source="NVIDIA V100 datasheet (PCIe column: tensor 112 TFLOPS, FP16 in, FP32 accumulate)",
        absent={"bf16": "Volta (sm_70) has no BF16 tensor cores: the V100 datasheet lists FP16 only"},
        memory_gib=(16, 32),
        memory_source="NVIDIA V100 datasheet: 16 or 32 GB HBM2",
    ),
    GpuSpec(
        name="V100 SXM2",
        aliases=("v100 sxm2", "v100"),
        capability=(7, 0),
        smem_per_block_optin=SMEM_SM70,
        peak_tflops={"fp16": 125.0},
        source="NVIDIA V100 datasheet (SXM2 column: tensor 125 TFLOPS, FP16 in, FP32 accumulate)",
        absent={"bf16": "Volta (sm_70) has no BF16 tensor cores: the V100 datasheet lists FP16 only"},
        memory_gib=(16, 32),
        memory_source="NVIDIA V100 datasheet: 16 or 32 GB HBM2",
    ),
    GpuSpec(
        name="MI300X",
        aliases=("mi300x",),
        capability=None,
        smem_per_block_optin=LDS_GFX942,
        peak_tflops={"bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
        source="AMD Instinct MI300X data sheet (dense matrix BF16/FP16 1307.4, FP8 2614.9; sparsity doubles)",
        note="ROCm, gfx942: no CUDA compute capability; the shared-memory figure is LDS per workgroup",
        memory_gib=(192,),
        memory_source="AMD Instinct MI300X data sheet: 192 GB HBM3",
    ),
)


def normalise_name(name: str) -> str:
    """Lower case, '-' and '_' as spaces, single spaces: 'NVIDIA-H100_PCIe' -> 'nvidia h100 pcie'."""
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


def known_gpu_names() -> list[str]:
    return [g.name for g in GPUS]


AUTO = "auto"  # the `gpu` value that means this machine's CUDA device
# Laptop parts reuse the desktop number on another chip at OEM-set clocks: such a name matches no row.
NOT_IN_TABLE = ("laptop", "mobile")


def _has(name: str, alias: str) -> bool:
    """`alias` stands as whole words in the normalised `name`."""
    return re.search(rf"(^|\s){re.escape(normalise_name(alias))}(\s|$)", name) is not None


@dataclass(kw_only=True, frozen=True, slots=True)
class GpuMatch:
    """What a GPU name resolved to: the row, the name asked for, and the other rows it could be when
    the name fits only by a family alias ("H100": SXM assumed, PCIe and NVL also match)."""

    gpu: GpuSpec
    asked: str
    alternatives: tuple[str, ...] = ()
    device: str | None = None  # the device's own name, for "auto"

    @property
    def note(self) -> str | None:
        """One line: 'H100 -> H100 SXM (assumed; also H100 PCIe, H100 NVL: name the variant)'."""
        asked = f"auto ({self.device})" if self.device else self.asked.strip()
        row = (
            self.gpu.name
            if normalise_name(asked) == normalise_name(self.gpu.name)
            else f"{asked} -> {self.gpu.name}"
        )
        if not self.alternatives:
            return row if self.device else None
        return f"{row} (assumed; also {', '.join(self.alternatives)}: name the variant)"


def _alternatives(gpu: GpuSpec, hits: list[str]) -> tuple[str, ...]:
    """Other rows whose aliases hold every alias `gpu` matched by: the variants a family name leaves open."""
    return tuple(
        g.name
        for g in GPUS
        if g is not gpu
        and all(any(_has(normalise_name(b), a) and normalise_name(b) != a for b in g.aliases) for a in hits)
    )


def match_gpu(name: str, needed_for: str = "", instead: str | None = None, example: str = "") -> GpuMatch:
    """Find a GPU by the name torch (`get_device_name`) or nvidia-smi reports, by table name, or "auto"
    (this machine's CUDA device): the first row (see the table's ordering rule) with an alias standing
    as whole words in the name. For "auto" the device's capability and shared memory replace the row's.

    Raises `TuneproofError` listing the known names when nothing matches: never a fallback.
    """
    facts = device_facts() if normalise_name(name) == AUTO else None
    n = normalise_name(facts.name if facts else name)
    for gpu in GPUS if not any(_has(n, w) for w in NOT_IN_TABLE) else ():
        hits = [normalise_name(a) for a in gpu.aliases if _has(n, a)]
        if hits:
            alternatives = _alternatives(gpu, hits)
            if facts is not None:
                smem = facts.smem_per_block_optin or gpu.smem_per_block_optin
                gpu = replace(gpu, capability=facts.capability, smem_per_block_optin=smem)
            return GpuMatch(
                gpu=gpu, asked=name, alternatives=alternatives, device=facts.name if facts else None
            )
    asked = f"{name!r}" if facts is None else f"{facts.name!r}, this device"
    if any(_has(n, w) for w in NOT_IN_TABLE):
        needed_for = "laptop parts are not in the table (another chip, OEM clocks)" + (
            f"; {needed_for}" if needed_for else ""
        )
    # `needed_for` says what the name was for; `instead` names the field that can replace it
    raise TuneproofError(
        f"unknown GPU {asked} ({{gpu}})" + (f": {needed_for}" if needed_for else ""),
        "use one of: "
        + ", ".join(known_gpu_names())
        + (f"; or give {{{instead}}}{example}" if instead else ""),
        fields=("gpu", instead) if instead else ("gpu",),
    )


def lookup_gpu(name: str, needed_for: str = "", instead: str | None = None, example: str = "") -> GpuSpec:
    """The row `match_gpu` finds (see there), without the note on an assumed variant."""
    return match_gpu(name, needed_for, instead, example).gpu


def capability_of(gpu: str) -> tuple[int, int]:
    """The CUDA compute capability of a named GPU, or of this machine's device for "auto" (even one
    the table does not know). A ROCm GPU has none: refused with the reason."""
    if normalise_name(gpu) == AUTO:
        facts = device_facts()
        name, capability = f"auto ({facts.name})", facts.capability
    else:
        found = lookup_gpu(gpu, "its compute capability is not known", "capability", ", e.g. 9.0")
        name, capability = found.name, found.capability
    if capability is None:
        raise TuneproofError(
            f"{name} ({{gpu}}) is a ROCm GPU: it has no CUDA compute capability",
            "give the CUDA card to explain for, or its capability",
            fields=("gpu", "capability"),
        )
    return capability


@dataclass(kw_only=True, frozen=True, slots=True)
class Peak:
    """An MFU denominator and why it is the one used. `tflops` None means no MFU; `reason` then says why."""

    tflops: float | None
    source: str | None
    dtype: str
    reason: str | None = field(default=None)


def peak_for(gpu: GpuSpec, dtype: str, variant: str | None = None) -> Peak:
    """The row's peak for `dtype`; `variant` (a `GpuMatch.note`) leads the source, on one line."""
    d = normalise_dtype(dtype)
    value = gpu.peak_tflops.get(d)
    if value is None:
        why = f": {gpu.absent[d]}" if d in gpu.absent else ""
        return Peak(
            tflops=None,
            source=None,
            dtype=d,
            reason=f"no dense {d} peak known for {gpu.name} (its table has "
            + ", ".join(f"{k} {v:g}" for k, v in sorted(gpu.peak_tflops.items()))
            + f" TFLOP/s){why}",
        )
    note = f" [note: {gpu.note}]" if gpu.note else ""
    return Peak(tflops=value, source=f"{variant or gpu.name}: {gpu.source}{note}", dtype=d)


def resolve_peak(
    gpu: str | None,
    dtype: str,
    peak_tflops: float | None = None,
    measure: Callable[[], Peak] | None = None,
) -> Peak:
    """The one policy for an MFU denominator, with its reason:

    1. a user-given `peak_tflops` (finite, > 0) wins, labelled as given;
    2. else the table value for `gpu` and `dtype` (an unknown GPU name is an error listing the known ones);
    3. else, when `measure` is given, a measured peak, labelled as measured, with why the table had none
       (an unknown GPU name included);
    4. else no peak (tflops None) and the reason.
    """
    from tuneproof.core import validate

    d = check_dtype(dtype)
    if peak_tflops is not None:
        value = validate.real(
            "peak_tflops", peak_tflops, low=1e-6, high=1e6, hint="pass dense TFLOP/s, e.g. 989"
        )
        return Peak(tflops=value, source="user-given peak", dtype=d)
    try:
        found = match_gpu(gpu, "no MFU without a trusted peak", "peak_tflops") if gpu is not None else None
    except TuneproofError:
        if measure is None:
            raise
        measured = measure()
        return Peak(
            tflops=measured.tflops,
            source=measured.source,
            dtype=measured.dtype,
            reason=f"GPU {gpu!r} is not in the table: measured instead",
        )
    table = peak_for(found.gpu, d, found.note) if found is not None else None
    if table is not None and table.tflops is not None:
        return table
    why = table.reason if table is not None else "no GPU named"
    if measure is not None:
        measured = measure()
        return Peak(
            tflops=measured.tflops,
            source=measured.source,
            dtype=measured.dtype,
            reason=f"{why}: measured instead",
        )
    fix = "give a GPU name or a peak in TFLOP/s" if table is None else "give the peak in TFLOP/s"
    return Peak(tflops=None, source=None, dtype=d, reason=f"{why or ''}: {fix}")
