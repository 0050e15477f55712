"""The software stack the SDPA chooser's rules depend on: torch, the CUDA build, the runtime cuDNN and the
cudnn-frontend compiled into torch. Read from the device present (`torch.version.cuda`,
`torch.backends.cudnn.version()`), given by the user (`--cudnn`, `--cuda`), or assumed, and then said so:
an answer that rests on an assumption names it (`Stack.assumptions`, in `explain --json`).

The assumptions are the shipped wheels of the installed torch's release (each with its source):
- torch 2.12 and later install the CUDA 13.0 build by default (pytorch/pytorch release notes; the
  CUDA 12.8 builds moved to their own index);
- torch 2.13's CUDA wheels ship cuDNN 9.23.1 (pytorch#187091, "Upgrade 12.8, 13.0 (and 12.9) wheels to
  cuDNN 9.23.1.3", merged 2026-06-12, before 2.13's branch cut);
- torch 2.13 compiles cudnn-frontend 1.24 or later (pytorch#185554, "Upgrade cudnn_frontend submodule to
  1.24 ... needed for d=256 support for SDPA", merged 2026-06-01).
None of these was read off a card here: a lent GPU's `bench/gpu_check.py` prints the live values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tuneproof.core.errors import TuneproofError

# (torch major, minor) -> what its CUDA wheels ship: CUDA build, runtime cuDNN (as torch reports it,
# 9.23.1 -> 92301), whether the compiled cudnn-frontend is >= 1.24 (kCuDNNFrontendSupportsD256)
SHIPPED = {
    (2, 13): ((13, 0), 92301, True, {
        "cuda": "13.0, the default build of torch 2.12 and later",
        "cudnn": "9.23.1, what torch 2.13's CUDA wheels ship (pytorch#187091)",
        "frontend": "cudnn-frontend >= 1.24 compiled into torch 2.13 (pytorch#185554): cuDNN head_dim 256",
    }),
}  # fmt: skip
REFERENCE_TORCH = (2, 13)  # the release the rules were transcribed for (attention/rules.py)
CUDNN_TEXT = re.compile(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\s*|\s*(\d{4,6})\s*")
CUDA_TEXT = re.compile(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*")


@dataclass(kw_only=True, frozen=True, slots=True)
class Stack:
    """torch (major, minor); the CUDA build (None: a CPU build); the runtime cuDNN as torch reports it
    (9.23.1 -> 92301; None: no cuDNN); the compiled cudnn-frontend >= 1.24; and where each came from."""

    torch: tuple[int, int]
    cuda: tuple[int, int] | None
    cudnn: int | None
    frontend_d256: bool
    sources: dict[str, str] = field(default_factory=dict)  # "cuda"/"cudnn"/"frontend" -> "live"/"given"/...

    @property
    def assumptions(self) -> list[str]:
        """Every input the answer rests on that was not read off the device or given by the user."""
        return [
            f"{k} {v.removeprefix('assumed ')}" for k, v in self.sources.items() if v.startswith("assumed")
        ]

    def cudnn_text(self) -> str:
        if self.cudnn is None:
            return "none"
        major, rest = divmod(self.cudnn, 10_000)
        return f"{major}.{rest // 100}.{rest % 100}"

    def line(self) -> str:
        """'torch 2.13 (installed), CUDA 13.0 (assumed), cuDNN 9.12.0 (given), ...' for the text output."""

        def said(key: str) -> str:
            return self.sources.get(key, "").split(" ")[0].rstrip(":,")

        cuda = ".".join(map(str, self.cuda)) if self.cuda else "none"
        frontend = "cudnn-frontend " + (">= 1.24" if self.frontend_d256 else "< 1.24")
        return (
            f"torch {self.torch[0]}.{self.torch[1]} (installed), CUDA {cuda} ({said('cuda')}), cuDNN "
            f"{self.cudnn_text()} ({said('cudnn')}), {frontend} ({said('frontend')})"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "torch": ".".join(map(str, self.torch)),
            "cuda": ".".join(map(str, self.cuda)) if self.cuda else None,
            "cudnn": self.cudnn_text() if self.cudnn is not None else None,
            "cudnn_frontend_d256": self.frontend_d256,
            "sources": {"torch": "installed", **self.sources},
        }


def parse_cudnn(text: str | int) -> int:
    """'9.23.1', '9.23' or torch's own number (92301) -> 92301; an error naming {cudnn} otherwise."""
    m = CUDNN_TEXT.fullmatch(str(text))
    if m is None:
        raise TuneproofError(
            f"{{cudnn}} {text!r} is not a cuDNN version", "write it as 9.23.1 (or 92301)", fields=("cudnn",)
        )
    if m.group(4):
        number = int(m.group(4))
    else:
        number = int(m.group(1)) * 10_000 + int(m.group(2)) * 100 + int(m.group(3) or 0)
    if not 90_000 <= number < 100_000:
        raise TuneproofError(
            f"{{cudnn}} {text!r} is out of range",
            "torch 2.4 and later link cuDNN 9: give 9.x",
            fields=("cudnn",),
        )
    return number


def parse_cuda(text: str) -> tuple[int, int]:
    m = CUDA_TEXT.fullmatch(str(text))
    if m is None or not 11 <= int(m.group(1)) <= 13 or int(m.group(2)) > 9:
        raise TuneproofError(
            f"{{cuda}} {text!r} is not a CUDA version", "write it as 12.8 or 13.0", fields=("cuda",)
        )
    return int(m.group(1)), int(m.group(2))


def installed_torch() -> tuple[int, int]:
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def stack_for(live: bool, cudnn: int | None = None, cuda: tuple[int, int] | None = None) -> Stack:
    """The stack for a CUDA answer: the device's own where `live` (this process runs on it), else the
    user's `cudnn` / `cuda`, else what the installed torch's release ships (SHIPPED, said to be assumed)."""
    import torch

    version = installed_torch()
    shipped_cuda, shipped_cudnn, shipped_d256, why = SHIPPED.get(version, SHIPPED[REFERENCE_TORCH])
    if version not in SHIPPED:
        ref = ".".join(map(str, REFERENCE_TORCH))
        why = {k: f"{v} (torch {version[0]}.{version[1]} taken to ship as {ref})" for k, v in why.items()}
    sources: dict[str, str] = {}
    if live and torch.version.cuda:
        got_cuda: tuple[int, int] | None = parse_cuda(torch.version.cuda)
        sources["cuda"] = f"live: torch.version.cuda {torch.version.cuda}"
    elif cuda is not None:
        got_cuda, sources["cuda"] = cuda, f"given: {cuda[0]}.{cuda[1]}"
    else:
        got_cuda, sources["cuda"] = shipped_cuda, f"assumed {why['cuda']}"
    runtime = torch.backends.cudnn.version() if live and torch.backends.cudnn.is_available() else None
    if runtime is not None:
        got_cudnn: int | None = int(runtime)
        sources["cudnn"] = f"live: torch.backends.cudnn.version() {runtime}"
    elif cudnn is not None:
        major, rest = divmod(cudnn, 10_000)
        got_cudnn, sources["cudnn"] = cudnn, f"given: {major}.{rest // 100}.{rest % 100}"
    else:
        got_cudnn, sources["cudnn"] = shipped_cudnn, f"assumed {why['cudnn']}"
    # the compiled frontend is not exposed to Python: always the release's, said so
    sources["frontend"] = f"assumed {why['frontend']}"
    return Stack(torch=version, cuda=got_cuda, cudnn=got_cudnn, frontend_d256=shipped_d256, sources=sources)
