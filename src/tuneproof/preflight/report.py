"""The pre-flight as the library runs it: `plan_preflight(run, gpu, fit)` (the base model resolved, the
card found, the run as it will train on that card; what cannot be checked refused in one line) and
`preflight_report(plan)`: every section (`tuneproof.preflight.sections`) in a `PreflightResult`.

The report reads the layers below in one order: the datasets first (their lengths and the tokens that
train), then the run's steps as each section prices them (`sections.price`: the steps, what their LoRA
adapts), then one section per library area that owns the number (FLOPs, dispatch, flex options,
memory), then what needs no model (recompiles, LoRA coverage, tokens, the stored base, shipping).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tuneproof.arch.inventory import Inventory, inventory
from tuneproof.arch.quantization import StoredQuantisation, stored_quantisation
from tuneproof.core.errors import TuneproofError
from tuneproof.core.progress import Progress
from tuneproof.core.verdict import NoWarnings, Verdict, counted
from tuneproof.data.ranks import StepCost
from tuneproof.hardware.card import Card
from tuneproof.preflight.sections import Section
from tuneproof.runs.run import Run


@dataclass(kw_only=True, slots=True)
class PreflightPlan:
    run: Run
    model: Any  # ResolvedModel
    config: dict[str, Any]  # the base's config.json
    folder: Path | None  # the base's local folder (its tokenizer), when there is one
    target: Card  # the card: capability, shared memory and memory (none named: the CPU)
    gpu: str | None
    fit: StepCost | None
    stored: StoredQuantisation | None = None  # the base's quantization_config, when it is stored quantised
    inventory: Inventory | None = None  # the modules the trainer loads, for an adapter's coverage


@dataclass(slots=True)
class PreflightResult(NoWarnings):
    run: Run
    sections: list[Section]
    notes: list[str] = field(default_factory=list)

    @property
    def findings(self) -> list[str]:
        return [*self.run.findings, *(f for s in self.sections for f in s.findings)]

    @property
    def verdict(self) -> Verdict:
        return counted(len(self.findings), "before launch", "nothing found that will be slow or wrong")

    def to_dict(self) -> dict[str, Any]:
        r = self.run
        return {
            "source": r.source,
            "kind": r.kind,
            "base_model": r.base_model,
            "run": {
                "sequence_len": r.seq_len,
                "micro_batch_size": r.micro_batch,
                "grad_accum": r.grad_accum,
                "sample_packing": r.packing,
                "pad_to_sequence_len": r.pad_to_seq_len,
                "attn_implementation": r.attn,
                "dtype": r.dtype,
                "gemma4_hybrid_attn_impl": r.hybrid,
                "gradient_checkpointing": r.grad_ckpt,
                "adapter": r.adapter,
                "lora_r": r.lora_r,
                "torch_compile": r.torch_compile,
                "fsdp": r.fsdp,
                "deepspeed": r.deepspeed,
            },
            "sections": {s.name: {"lines": s.lines, **s.data, "findings": s.findings} for s in self.sections},
            "findings": self.findings,
            "notes": [*r.notes, *self.notes],
            "verdict": self.verdict.outcome,
            "exit_code": self.verdict.exit_code,
        }

    def render(self, console: Any) -> None:
        from rich.markup import escape

        r = self.run
        console.print(f"preflight {escape(r.source)} ({r.kind}): base {escape(r.base_model)}", markup=True)
        for note in [*r.notes, *self.notes]:
            console.print(f"  note: {escape(note)}")
        for s in self.sections:
            console.print(f"{s.name}")
            for line in s.lines:
                console.print(f"  {escape(line)}")
        if self.findings:
            console.print("findings")
            for f in self.findings:
                console.print(f"  - {escape(f)}")
        v = self.verdict
        console.print(f"verdict: {v.outcome} ({v.reason}; exit {v.exit_code})")


def plan_preflight(run: Run, gpu: str | None, fit: StepCost | None) -> PreflightPlan:
    """The card named by `gpu` ("auto": this device's; a capability written as one, 9.0 or sm_90: the
    capability's table, no memory), the run's base model resolved, and the run as it will train there:
    bf16 on a card without it (fp16 for Axolotl's `bf16: auto`, a finding otherwise), the recipe's
    attention auto decided. A width past the model's positions is refused."""
    from tuneproof.arch import resolve
    from tuneproof.arch.locate import locate_config
    from tuneproof.hardware.card import card

    target = card(gpu)
    model = resolve("tiny" if run.base_model == "tiny" else run.base_model)
    folder = None if run.base_model == "tiny" else locate_config(run.base_model).parent
    problem = model.positions_problem(run.seq_len, run.seq_len_key)
    if problem:
        raise TuneproofError(
            f"{run.source}: {problem}", "lower sequence_len, or extend the model's context first"
        )
    config = model.source if isinstance(model.source, dict) else {}
    stored = stored_quantisation(config)
    modules = inventory(config) if run.adapter and config else None
    if target.capability is not None and target.capability < (8, 0) and run.dtype == "bf16":
        if run.bf16_auto:
            note = "bf16 auto on a card without bf16 (capability below 8.0): Axolotl trains in fp16"
            run = replace(run, dtype="fp16", notes=(*run.notes, note))
        else:
            finding = (
                f"{run.source}: bf16 on a card of capability {target.capability[0]}.{target.capability[1]}, "
                "which has no bf16: transformers' Trainer refuses it; use fp16 or fp32"
            )
            run = replace(run, findings=(*run.findings, finding))
    run = run.on_device(cuda=target.capability is not None)  # tuneproof train's attention auto
    return PreflightPlan(
        run=run, model=model, config=config, folder=folder, target=target, gpu=gpu, fit=fit, stored=stored,
        inventory=modules,
    )  # fmt: skip


def preflight_report(plan: PreflightPlan, progress: Progress | None = None) -> PreflightResult:
    """Every section of the pre-flight, in the order the module's docstring gives."""
    from tuneproof.preflight import batches, sections, vocab
    from tuneproof.preflight.base_quant import base_quantisation
    from tuneproof.preflight.coverage import coverage

    say = progress or (lambda _m: None)
    r = plan.run
    notes: list[str] = []
    lens, padding, distinct, widths = None, None, None, None
    out: list[Section] = []
    tokenizer, why_not = None, None
    if r.datasets or r.tokens.asked:
        folder, why_not = vocab.tokenizer_folder(r, plan.folder)
        tokenizer, why_not = batches.read_tokenizer(folder) if folder is not None else (None, why_not)
    if r.datasets:
        say("datasets")
        lens, ds_notes, ds_findings = batches.lengths(r, tokenizer)
        notes.extend(ds_notes)
        r = replace(r, findings=(*r.findings, *ds_findings))
    else:
        notes.append("no datasets listed: padding and wall time need real lengths")
    if lens is not None:
        sec, padding, distinct, widths = batches.batching(r, lens)
        out.append(sec)
    if r.datasets and tokenizer is not None:
        say("tokens that train")
        out.append(trained_tokens(r, tokenizer, plan.folder))
    real = None if r.packing or not widths else int(sorted(widths)[len(widths) // 2])
    priced = sections.price(r, plan.model, real_width=real, padding=None if r.packing else padding)
    cov = (
        coverage(r, plan.inventory, str(plan.config.get("model_type", "")), priced.asked)
        if plan.inventory is not None
        else None
    )
    say("FLOP ledger")
    out.append(sections.ledger(r, plan.model, priced))
    say("attention dispatch")
    out.append(sections.dispatch(r, plan.model, plan.target, priced))
    out.append(sections.flex_options(plan.model, plan.target, plan.gpu, r))
    say("memory ledger")
    out.append(sections.memory(r, plan.model, plan.target, priced))
    out.append(sections.recompiles(r, distinct))
    if cov is not None:
        out.append(lora(r, cov))
    added = vocab.tokens(r, tokenizer, why_not, plan.model, str(plan.config.get("model_type", "")))
    if added is not None:
        out.append(added)
    if plan.stored is not None:
        out.append(base_quantisation(r, plan.stored))
    out.append(sections.ship(r, plan.stored))
    if plan.fit is not None and widths:
        out.append(batches.wall_time(r, widths, plan.fit))
    elif plan.fit is not None:
        out.append(batches.step_time(r, plan.fit))
    return PreflightResult(r, out, notes)


def trained_tokens(r: Run, tokenizer: Any, folder: Path | None) -> Section:
    """The tokens that train in each local dataset, as the run's trainer builds its labels
    (`tuneproof.labels`): one line per dataset, and its findings."""
    from tuneproof.labels.from_run import rules_for
    from tuneproof.labels.report import ModelFacts, check
    from tuneproof.labels.rows import read_rows
    from tuneproof.preflight.batches import MAX_ROWS

    s = Section(name="trained tokens")
    model = ModelFacts.from_folder(folder)
    for ds in r.datasets:
        if ds.local is None:
            continue
        rules, why = rules_for(r, ds)
        if rules is None:
            s.lines.append(f"{ds.path}: not modelled: {why}")
            continue
        try:
            rows = read_rows(ds.local, MAX_ROWS)
        except TuneproofError as e:
            s.lines.append(f"{ds.path}: not read: {e.message}")
            continue
        report = check(rows, tokenizer, rules, model, ds.path)
        s.lines.append(f"{ds.path}: {report.lines[0]}")
        s.lines.extend(f"  {line}" for line in report.lines[1:])
        s.findings.extend(f"tokens that train: {ds.path}: {f.text}" for f in report.findings)
        s.data[ds.path] = report.to_dict()
    return s


def lora(r: Run, cov: Any) -> Section:
    """What the run's LoRA adapts on the model the trainer loads (`preflight.coverage`)."""
    s = Section(name="lora", data=cov.to_dict(), findings=list(cov.findings))
    fams = ", ".join(f"{k} x{v}" for k, v in sorted(cov.families.items()))
    s.lines.append(
        f"{len(cov.adapted)} modules adapted ({fams or 'none'}), rank {r.lora_r}: "
        f"{cov.adapter_params / 1e6:,.1f} M adapter parameters, "
        f"{cov.adapter_params / max(cov.total_params, 1):.3%} "
        f"of {cov.total_params / 1e9:,.2f} B"
    )
    if cov.experts_adapted:
        s.lines.append(f"expert parameters adapted in place: {len(cov.experts_adapted)}")
    return s
