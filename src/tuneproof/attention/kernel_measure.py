"""flex kernel options measured on the device: compile the candidate for the real head_dim, dtype and
pass on a tiny input and take Triton's own answer, where `kernel_options` can only estimate.

A candidate that compiles and runs fits. One that fails raises Triton's out-of-resource error, whose
text carries the bytes it needed and the card's limit ("out of resource: shared memory, Required:
262144, Hardware limit: 232448", `kernel_options.parse_out_of_resource`). Each answer is cached per
(torch, triton, device, head_dim, dtype, pass, options) in the tuneproof cache folder, so a device pays
for each compile once. `best_choice` measures when a CUDA device of the asked capability is in this
process, and estimates otherwise; every KernelChoice says which (`source`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.attention.kernel_options import (
    CANDIDATES,
    KernelChoice,
    choose_for_head_dims,
    default_bwd,
    default_fwd,
    parse_out_of_resource,
    triton_options,
)
from tuneproof.core.errors import TuneproofError

CompileStep = Callable[[int, str, str, dict[str, int]], None]  # raises Triton's error when it does not fit
CACHE_FILE = "flex-smem.json"


@dataclass(kw_only=True, frozen=True, slots=True)
class Measurement:
    fits: bool
    required: int | None  # bytes Triton asked for, when it refused
    limit: int | None
    cached: bool = False


def compile_flex(head_dim: int, dtype: str, pass_: str, options: dict[str, int]) -> None:
    """Compile and run flex_attention with `options` on a (1, 1, 256, head_dim) input on CUDA; the
    backward too for pass "bwd". Raises whatever Triton or inductor raise."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    from tuneproof.core.dtypes import torch_dtype

    dt = torch_dtype(dtype)
    q, k, v = (
        torch.randn(1, 1, 256, head_dim, device="cuda", dtype=dt, requires_grad=pass_ == "bwd")
        for _ in range(3)
    )
    fn = torch.compile(flex_attention, dynamic=False)
    out = fn(q, k, v, kernel_options=dict(options) if options else None)  # type: ignore[arg-type]
    if pass_ == "bwd":
        out.sum().backward()
    torch.cuda.synchronize()


def _device_key() -> str:
    import torch

    triton = sys.modules.get("triton")
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no-cuda"
    return f"torch {torch.__version__} triton {getattr(triton, '__version__', '?')} {name}"


def _cache_path() -> Path:
    from tuneproof.core.io import cache_dir

    return cache_dir() / CACHE_FILE


def measure(
    head_dim: int,
    dtype: str,
    pass_: str,
    options: dict[str, int],
    *,
    compile_step: CompileStep | None = None,
    device_key: str | None = None,
) -> Measurement:
    """Does `options` fit on this device for (head_dim, dtype, pass_)? From the cache, or compiled now."""
    key = json.dumps([device_key or _device_key(), head_dim, dtype, pass_, sorted(options.items())])
    path = _cache_path()
    try:
        table = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        table = {}  # a damaged cache is a miss
    if key in table and isinstance(table[key], dict):
        hit = table[key]
        return Measurement(
            fits=bool(hit.get("fits")), required=hit.get("required"), limit=hit.get("limit"), cached=True
        )
    try:
        (compile_step or compile_flex)(head_dim, dtype, pass_, options)
        result = Measurement(fits=True, required=None, limit=None)
    except Exception as e:  # Triton and inductor raise several types; only the resource error is an answer
        parsed = parse_out_of_resource(str(e))
        if parsed is None:
            raise
        result = Measurement(fits=False, required=parsed[0], limit=parsed[1])
    table[key] = {"fits": result.fits, "required": result.required, "limit": result.limit}
    try:
        from tuneproof.core.io import atomic_write_bytes

        atomic_write_bytes(path, json.dumps(table, indent=0).encode())
    except (OSError, TuneproofError):
        pass  # an unwritable cache costs the next run a compile, nothing else
    return result


def choose_measured(
    head_dims: Iterable[int], dtype: str, pass_: str, *, capability: tuple[int, int],
    compile_step: CompileStep | None = None, device_key: str | None = None,
    smem_limit_bytes: int | None = None,
) -> KernelChoice:  # fmt: skip
    """The first candidate every head_dim compiles with, largest first: torch's defaults, the estimate's
    own choice, then each smaller block size from the default's stages down to one."""
    dims = sorted(set(head_dims))
    estimated = choose_for_head_dims(
        dims, dtype, capability=capability, pass_=pass_, smem_limit_bytes=smem_limit_bytes
    )
    default = default_fwd if pass_ == "fwd" else default_bwd
    stages = max(default(d, dtype, capability)[2] for d in dims)
    tries: list[dict[str, int]] = [{}, estimated.options]
    tries += [triton_options(pass_, m, n, st, 4) for m, n in CANDIDATES for st in range(stages, 0, -1)]
    log: list[str] = []
    seen: set[str] = set()
    for opts in tries:
        if json.dumps(sorted(opts.items())) in seen:
            continue
        seen.add(json.dumps(sorted(opts.items())))
        results = [
            measure(d, dtype, pass_, opts, compile_step=compile_step, device_key=device_key) for d in dims
        ]
        failed = [r for r in results if not r.fits]
        shown = opts or "torch's defaults"
        if not failed:
            log.append(f"{shown}: compiled and ran for head_dims {dims}")
            reason = f"measured on the device ({pass_}): " + "; ".join(log)
            limit = next((r.limit for r in results if r.limit), estimated.smem_limit)
            return KernelChoice(
                options=dict(opts),
                reason=reason,
                smem_bytes=estimated.smem_bytes,
                smem_limit=limit,
                attempts=list(log),
                source="measured",
            )
        worst = max(failed, key=lambda r: r.required or 0)
        log.append(f"{shown}: needs {worst.required:,} B > {worst.limit:,} B")
    raise TuneproofError(
        f"no flex block size compiles for head_dims {dims} {dtype} {pass_} on this device",
        "use another attention backend",
    )


def best_choice(
    head_dims: Iterable[int], dtype: str, capability: tuple[int, int], pass_: str,
    smem_limit_bytes: int | None = None,
) -> KernelChoice:  # fmt: skip
    """Measured when this process has a CUDA device of `capability` (and torch is already imported: no
    import for a caller that does not need it), else the estimate against `smem_limit_bytes` (the
    device's own, from torch or a trace; None: the capability's table)."""
    torch: Any = sys.modules.get("torch")
    if (
        torch is not None
        and torch.cuda.is_available()
        and torch.cuda.get_device_capability() == tuple(capability)
    ):
        from tuneproof.hardware.device import device_smem_limit

        limit = device_smem_limit() or smem_limit_bytes
        return choose_measured(head_dims, dtype, pass_, capability=capability, smem_limit_bytes=limit)
    return choose_for_head_dims(
        head_dims, dtype, capability=capability, pass_=pass_, smem_limit_bytes=smem_limit_bytes
    )
