"""`tuneproof lora check`: did every adapted module train (`ship.health.check_adapter`). A `CheckSpec`
(the adapter, optionally its base and the adapter saved at step 0), `prepare` and `run`: a `Health`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tuneproof.core.extras import require
from tuneproof.core.progress import Progress
from tuneproof.ship.health import Health, check_adapter


@dataclass(kw_only=True, frozen=True, slots=True)
class CheckSpec:
    """What `tuneproof lora check` judges: the adapter folder, and optionally its base (a model folder
    or config.json) and the adapter saved at step 0."""

    adapter_dir: Path
    base: Path | None = None
    initial: Path | None = None
    labels: dict[str, str] = field(default_factory=dict)  # the text's names for the fields (--base)


def prepare(spec: CheckSpec) -> CheckSpec:
    """The check before any file is read: PEFT is installed when a base is given (it wraps the base on
    the meta device). The adapter's own files are checked as `run` reads their headers; the spec is
    the plan."""
    if spec.base is not None:
        require("train", "checking an adapter against a base (PEFT wraps it on the meta device)", ("peft",))
    return spec


def run(plan: CheckSpec, progress: Progress | None = None) -> Health:
    """The adapter's health (`check_adapter`); quick (headers and the adapter's own small tensors), so
    no progress is reported."""
    health = check_adapter(plan.adapter_dir, plan.base, plan.initial)
    health.labels = dict(plan.labels)
    return health
