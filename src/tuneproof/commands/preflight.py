"""`tuneproof preflight` as two library calls: `prepare(spec)` reads the run's config (an Axolotl YAML or a
tuneproof recipe TOML) and its base model, refusing in one line what cannot be checked; `run(plan)`
computes every section and returns a `PreflightResult`, whose verdict is FINDINGS (exit 1) when any
section found something slow or wrong and CLEAN (exit 0) otherwise. The spec takes a config already
loaded too (`PreflightSpec(config=...)`: the Axolotl plugin's use).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.data.ranks import StepCost
from tuneproof.preflight.report import PreflightPlan, PreflightResult, plan_preflight, preflight_report
from tuneproof.runs.axolotl import from_axolotl
from tuneproof.runs.read import RUN_HINT

__all__ = ["PreflightPlan", "PreflightResult", "PreflightSpec", "prepare", "run"]


@dataclass(kw_only=True, frozen=True, slots=True)
class PreflightSpec:
    """A run's own config to check before launch: `run_file` an Axolotl YAML or a tuneproof recipe
    TOML, or `config` an Axolotl config already loaded (a mapping of its options, as the Axolotl plugin
    has it; `source` names it); `gpu` the card, for dispatch and flex kernel options ("auto": this
    device, None: the CPU); `fit` the step's measured cost (`tuneproof.data.ranks.StepCost`: c + rows x
    (a*w + b*w^2) seconds at width w, from a `tuneproof probe` or `fit` of this model), for the run's wall
    time; None: none."""

    run_file: Path | None = None
    config: Mapping[str, Any] | None = None
    source: str = ""
    gpu: str | None = None
    fit: StepCost | None = None

    def __post_init__(self) -> None:
        if (self.run_file is None) == (self.config is None):
            raise TuneproofError("give a run's config file or a loaded config, one of them", RUN_HINT)
        if self.run_file is not None:  # a str is taken as the path it names
            object.__setattr__(self, "run_file", Path(self.run_file))


def prepare(spec: PreflightSpec) -> PreflightPlan:
    """The run read (its file, or an Axolotl config already loaded), its base model resolved and the
    card found (`tuneproof.preflight.report.plan_preflight`); what cannot be checked is refused here in
    one line."""
    from tuneproof.runs.read import read_run_file

    if spec.config is not None:
        run = from_axolotl(dict(spec.config), spec.source or "the Axolotl config")
    else:
        assert spec.run_file is not None  # checked by the spec
        run = read_run_file(spec.run_file)
    return plan_preflight(run, spec.gpu, spec.fit)


def run(plan: PreflightPlan, progress: Progress | None = None) -> PreflightResult:
    """Every section (`tuneproof.preflight.report.preflight_report`)."""
    return preflight_report(plan, progress)
