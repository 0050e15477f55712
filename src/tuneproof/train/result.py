"""What a training run returns: its folder, adapter, steps and mean loss, the adapter's health and
where the base's fingerprint went; `to_dict()` is exactly what `tuneproof train --json` prints and
`render(console)` the summary it prints otherwise (docs/train.md shows it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.verdict import Verdict


@dataclass(kw_only=True, frozen=True, slots=True)
class TrainResult:
    """A `tuneproof.core.verdict.Result`. `warnings` is empty: a run's warnings (first-step advice, an
    adapter that did not train everywhere) are Python warnings raised as they happen, most of them
    from inside the Trainer's callbacks, so a library caller records them the usual way. `verdict` is
    None: training judges nothing (the adapter's health is reported, and `lora check` judges it)."""

    output_dir: Path
    adapter_dir: Path
    steps: int
    loss: float
    health: str | None  # the adapter's health summary; None where it was not judged (not PEFT)
    fingerprint: Path | None  # the base's fingerprint in the adapter folder, if it was recorded
    attention: str
    main: bool = True  # the process that wrote the outputs (rank 0); others print nothing
    resumed: bool = False  # continued from a checkpoint: the mean loss is this session's
    health_file: Path | None = None  # OUT/adapter_health.json, where it was written
    report_file: Path | None = None  # OUT/report/report.md, where it was written
    stopped: str | None = None  # the budget stopped training before max_steps: where, and why
    warnings: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict | None:
        return None

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof train --json` prints."""
        return {
            "output_dir": str(self.output_dir), "adapter": str(self.adapter_dir), "steps": self.steps,
            "loss": self.loss, "health": self.health, "attention": self.attention,
            "base_fingerprint": str(self.fingerprint) if self.fingerprint else None,
            "adapter_health": str(self.health_file) if self.health_file else None,
            "report": str(self.report_file) if self.report_file else None,
            "stopped_by_budget": self.stopped,
        }  # fmt: skip

    def lines(self) -> list[str]:
        """The summary, one `label     text` line each."""
        out = self.output_dir
        fp = self.fingerprint or "not recorded: the base is not a local safetensors folder"
        return [
            f"trained   {self.steps} optimizer steps, mean loss {self.loss:.4f}, attention {self.attention}",
            *(["          (the mean loss is over the steps of this session, as the Trainer reports it)"]
              if self.resumed else []),
            *([f"stopped   {self.stopped}"] if self.stopped else []),
            f"adapter   {self.adapter_dir}",
            f"health    {self.health or 'unknown (not a PEFT model)'}",
            f"report    {out / 'report' / 'report.md'} (plots beside it; report.json)",
            f"base      fingerprint {fp}",
            f"recipe    {out / 'recipe.toml'} (every default filled in)",
        ]  # fmt: skip

    def render(self, console: Any) -> None:
        """The summary as it is: no markup, emoji codes or highlighting, never wrapped (a path stays
        whole for copying)."""
        for line in self.lines():
            console.print(line, markup=False, emoji=False, highlight=False, soft_wrap=True)
