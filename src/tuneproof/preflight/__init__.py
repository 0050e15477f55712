"""Pre-flight: read a run's own config (an Axolotl YAML or a tuneproof recipe) and say before launch
what will be slow or wrong, each finding from the area that owns the number."""

from tuneproof.preflight.run import PreflightResult, PreflightSpec, preflight_axolotl, prepare, run

__all__ = ["PreflightResult", "PreflightSpec", "preflight_axolotl", "prepare", "run"]
