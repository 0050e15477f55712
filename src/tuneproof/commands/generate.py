"""`tuneproof generate`: an arm for the gate, every prompt answered SAMPLES times in each of RUNS runs
(`gate.generate`), written with its sidecar of model fingerprints, settings and versions. A
`GenerateSpec`, `prepare(spec)` (the model, adapter and prompts checked, the arm's path too) and
`run`: a `GenerateResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuneproof.core.progress import Progress
from tuneproof.core.terminal import plain
from tuneproof.gate.generate import GenerateSpec, Prompt, check_paths, generate, meta_path, read_prompts

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["GeneratePlan", "GenerateResult", "GenerateSpec", "prepare", "render_generated", "run"]


@dataclass(frozen=True, slots=True)
class GeneratePlan:
    spec: GenerateSpec
    prompts: list[Prompt]
    out: Path


@dataclass(kw_only=True, frozen=True, slots=True)
class GenerateResult:
    """An arm written to `out` (and its sidecar `meta` beside it); nothing is judged."""

    meta: dict[str, Any]
    out: Path
    num_responses: int
    warnings: list[str] = field(default_factory=list)
    verdict: None = None

    def to_dict(self) -> dict[str, Any]:
        return self.meta

    def render(self, console: Any) -> None:
        render_generated(self, console)


def prepare(spec: GenerateSpec) -> GeneratePlan:
    """The model and adapter folders, the prompts, and the arm and sidecar paths, before any load."""
    from tuneproof.core.errors import TuneproofError
    from tuneproof.core.io import check_out_file

    if spec.out is None:
        raise TuneproofError("no {out} for the arm", "name the JSONL file to write", fields=("out",))
    check_paths(spec)
    prompts = read_prompts(spec.prompts)
    out = Path(spec.out)
    check_out_file(out, (spec.prompts,))
    check_out_file(meta_path(out), (spec.prompts,))
    return GeneratePlan(spec, prompts, out)


def run(plan: GeneratePlan, progress: Progress | None = None) -> GenerateResult:
    """Generate (`progress` hears prompts done of all), then write the arm (gzip for .gz) and sidecar."""
    import gzip
    import json

    from tuneproof.core.io import atomic_write_bytes, atomic_write_json

    rows, meta = generate(plan.spec, plan.prompts, progress)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode()
    atomic_write_bytes(plan.out, gzip.compress(data, mtime=0) if plan.out.suffix == ".gz" else data)
    atomic_write_json(meta_path(plan.out), meta)
    return GenerateResult(meta=meta, out=plan.out, num_responses=len(rows))


def render_generated(result: GenerateResult, console: Console) -> None:
    gen = result.meta["generation"]
    seeds = gen["seeds"]
    shape = (
        f"{result.meta['num_prompts']} prompts x {gen['samples']} samples x {gen['runs']} runs, "
        f"seeds {seeds[0]}..{seeds[-1]}"
    )
    from tuneproof.gate.generate import meta_path

    written = f"to {result.out}, and {meta_path(result.out)}"
    plain(console, f"wrote {result.num_responses} responses ({shape}) {written}")
