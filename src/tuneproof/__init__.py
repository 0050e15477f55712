"""tuneproof: honest numbers for LLM fine-tuning runs.

Front door (imports stay light: heavy modules load when first used):

    from tuneproof import from_config, RunSpec, flop_report, lookup_gpu
"""

from __future__ import annotations

from typing import Any

from tuneproof.errors import TuneproofError

__version__ = "0.1.0"

__all__ = [
    "RunSpec",
    "TuneproofError",
    "__version__",
    "flop_report",
    "from_config",
    "lookup_gpu",
]

_LAZY = {
    "RunSpec": "tuneproof.flops",
    "flop_report": "tuneproof.flops",
    "from_config": "tuneproof.arch",
    "lookup_gpu": "tuneproof.hardware",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tuneproof' has no attribute {name!r}")
