"""tuneproof: honest numbers for LLM fine-tuning runs.

Front door (imports stay light: heavy modules load when first used):

    from tuneproof import resolve, Step, flop_report, resolve_peak
    from tuneproof import TuneproofCallback   # transformers' Trainer callback (loads transformers)
"""

from __future__ import annotations

from tuneproof.core.errors import TuneproofError as TuneproofError
from tuneproof.core.lazy import lazy
from tuneproof.core.version import __version__ as __version__

_EXPORTS = {
    "Run": "tuneproof.runs.run",
    "RunSpec": "tuneproof.runs.step",  # Step's name before issue 47: library callers' code keeps working
    "Step": "tuneproof.runs.step",
    "TuneproofCallback": "tuneproof.train.callback",
    "flop_report": "tuneproof.flops",
    "from_config": "tuneproof.arch",
    "lookup_gpu": "tuneproof.hardware.gpus",
    "resolve": "tuneproof.arch",
    "resolve_peak": "tuneproof.hardware.gpus",
}
__all__ = sorted([*_EXPORTS, "TuneproofError", "__version__"])
__getattr__, __dir__ = lazy(__name__, _EXPORTS)
