"""`tuneproof train`: a thin runner on transformers' `Trainer` + PEFT with every reference-run fix on.

    plan = prepare(TrainSpec(recipe=recipe, output_dir=out))   # every cheap check, nothing written
    result = run(plan)                                         # the weights, the training, the outputs

Nothing here is a training loop or a launcher: the Trainer trains, `torchrun` / `accelerate launch`
start the processes (`torchrun --nproc-per-node N -m tuneproof train R.toml`). What this adds:
- batches from `BucketBatchSampler` (`use_bucketing`), padded to each micro-batch's own longest row;
- attention `auto`: sdpa on the CPU, flex_attention with safe kernel options and a recompile guard
  sized from the sampler's widths on CUDA (`enable_flex`);
- `TuneproofCallback`: intended and performed FLOPs and MFU in the logs, first-step warnings, the
  adapter's health at the end;
- at the end: the adapter (PEFT `save_pretrained`), its health, the base's fingerprint beside it
  (`adapter/base_fingerprint.json`, what `tuneproof merge` checks), and the report.

The main process (the one that writes the run folder) is decided once, in `prepare`, by the
Trainer's own rule: `Trainer.is_world_process_zero` is `args.process_index == 0` on the arguments
the run's Trainer is built with, and the callback reads the same from the Trainer's state.

The embedded default (no recipe) trains the tiny model on `tiny_corpus.jsonl` (generated sentences
shipped with the package) on the CPU in about a minute. The tiny base is saved next to the run, so
the adapter can be checked and merged like any other.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.arch.targets import peft_matches
from tuneproof.core import validate
from tuneproof.core.deadline import Deadline
from tuneproof.core.errors import TuneproofError
from tuneproof.core.extras import require
from tuneproof.core.progress import Progress
from tuneproof.measure.probe import span_widths as probe_widths
from tuneproof.runs.recipe import Recipe
from tuneproof.runs.run import auto_attention
from tuneproof.train.base import attach_lora, base_model, base_tokenizer, check_lora_targets
from tuneproof.train.data import check_chat_template, is_chat, read_records, tokenise
from tuneproof.train.folder import RECIPE_NAME, Written, check_output, last_checkpoint, write_state
from tuneproof.train.result import TrainResult
from tuneproof.train.trainer import build_trainer, progress_bars_off, quiet_logs, training_args

__all__ = ["TrainPlan", "TrainResult", "TrainSpec", "prepare", "run"]


@dataclass(kw_only=True, frozen=True, slots=True)
class TrainSpec:
    recipe: Recipe
    output_dir: Path | None = None  # None: the recipe's run.output_dir
    resume: bool = False  # continue the run in output_dir from its last complete checkpoint
    quiet: bool = False  # no progress bars (stdout carries the caller's JSON)
    budget_s: float | None = None  # seconds for the whole command; training stops to keep it
    budget_from_start: bool = False  # count the budget from the process's start (the command line)

    def __post_init__(self) -> None:
        if self.budget_s is not None:
            validate.real("budget_s", self.budget_s, low=0.0, low_open=True, high=1e7, hint="seconds")


@dataclass(kw_only=True, frozen=True, slots=True)
class TrainPlan:
    """Everything `prepare` checked and decided; `run` loads the weights and trains."""

    recipe: Recipe  # its run.output_dir is `out`
    out: Path
    resume: bool
    quiet: bool
    main: bool  # this process writes the run folder (rank 0)
    cuda: bool
    attention: str  # the path trained with ("auto" resolved)
    data: list[Any]  # tokenised text rows, or the chat records (for TRL's SFTTrainer)
    tokenizer: Any
    folder: Path | None  # the base's folder on disk; None: the tiny model, saved to OUT/base by run
    args: Any  # the Trainer's arguments (TrainingArguments or SFTConfig)
    owns_group: bool = False  # the arguments started the process group (torchrun): run tears it down
    deadline: Deadline | None = None  # the command's budget, started in `prepare`


def prepare(spec: TrainSpec) -> TrainPlan:
    """Every check that needs no weights, once, before anything is written: the recipe's data and
    every row, the output folder, the tokenizer (and its chat template for chat rows), and the LoRA
    targets (on the model's modules on the meta device)."""
    require("train", "tuneproof train")
    deadline = None
    if spec.budget_s is not None:
        deadline = (
            Deadline.from_command_start(spec.budget_s)
            if spec.budget_from_start
            else Deadline(budget_s=spec.budget_s)
        )
    out = Path(spec.output_dir or spec.recipe.run.output_dir)
    recipe = dataclasses.replace(spec.recipe, run=dataclasses.replace(spec.recipe.run, output_dir=str(out)))
    # the folder and the dataset are refused before torch and transformers load (minutes on a busy
    # machine); the rank is the launcher's (RANK), checked again below by the Trainer's own rule
    if _launcher_rank() == 0:
        check_output(out, recipe, spec.resume)
    records = read_records(recipe)  # a missing or wrong dataset is refused before the model loads
    chat = is_chat(records)
    import torch

    cuda = torch.cuda.is_available()
    attention = recipe.run.attention
    if attention == "auto":  # the one rule of a recipe's auto (`runs.run.auto_attention`)
        attention = auto_attention(cuda)
    owns_group = not _in_process_group()  # building the arguments starts it under torchrun
    args = training_args(recipe, out, chat, cuda, spec.quiet)
    owns_group = owns_group and _in_process_group()
    _refuse_zero3()
    main = args.process_index == 0  # Trainer.is_world_process_zero, before the Trainer exists
    if main:  # under torchrun / accelerate, rank 0 alone writes (and so checks) the run folder
        check_output(out, recipe, spec.resume)
    tokenizer, folder = base_tokenizer(recipe)
    if chat:
        check_chat_template(tokenizer, recipe)
    data = records if chat else tokenise(records, recipe, tokenizer)
    check_lora_targets(recipe, folder)
    return TrainPlan(
        recipe=recipe, out=out, resume=spec.resume, quiet=spec.quiet, main=main, cuda=cuda,
        attention=attention, data=data, tokenizer=tokenizer, folder=folder, args=args, owns_group=owns_group,
        deadline=deadline,
    )  # fmt: skip


def run(
    plan: TrainPlan,
    progress: Progress | None = None,
    callbacks: list[Any] | None = None,
) -> TrainResult:
    """Load the weights, train, and write the adapter, its health, the base's fingerprint and the
    report (the main process). `progress` gets a line per phase after training (the report's probe);
    `callbacks` are extra `TrainerCallback`s for the Trainer (library use)."""
    owned = plan.owns_group  # a group the caller made stays the caller's
    with progress_bars_off(plan.quiet):
        trainer, callback, folder = _set_up(plan)
        for extra in callbacks or []:
            trainer.add_callback(extra)
        stop = _budget_stop(plan, trainer)
        output = _train(plan, trainer, callback)
        processes = _processes(trainer, callback)  # a collective: every rank, before any leaves
        adapter_dir = plan.out / "adapter"
        trainer.save_model(str(adapter_dir))  # the main process only (the Trainer's own rule)
        kept = dict(steps=int(output.global_step), loss=float(output.training_loss), attention=plan.attention,
                    resumed=plan.resume, main=plan.main,
                    stopped=stop.line() if stop is not None and stop.stopped_at else None)  # fmt: skip
        if not plan.main:
            _leave_process_group(owned)
            return TrainResult(
                output_dir=plan.out,
                adapter_dir=adapter_dir,
                health=None,
                fingerprint=None,
                **kept,  # type: ignore[arg-type]
            )
        result = _save(plan, trainer, callback, folder, adapter_dir, kept)
        facts = _report_facts(trainer) | {"processes": processes}
        del trainer  # the probe builds its own model: free this one's memory first
        _free(plan.cuda)
        report = write_run_report(plan.out / "report", plan.recipe, plan.attention, plan.cuda, callback,
                                  result.health, progress, deadline=plan.deadline, **facts)  # fmt: skip
    _leave_process_group(owned)
    return dataclasses.replace(result, report_file=report)


def _budget_stop(plan: TrainPlan, trainer: Any) -> Any:
    """The callback that stops training at the command's budget, keeping room for the report's probe
    (its own budget, at most a quarter of the command's); None without a budget."""
    if plan.deadline is None:
        return None
    from tuneproof.train.budget_stop import BudgetStop

    reserve = min(float(plan.recipe.run.probe_budget_s), plan.deadline.budget_s / 4)
    stop = BudgetStop(plan.deadline, reserve_s=reserve)
    trainer.add_callback(stop)
    return stop


def _launcher_rank() -> int:
    """This process's rank as torchrun and accelerate set it (RANK), 0 without a launcher."""
    import os

    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _refuse_zero3() -> None:
    """DeepSpeed ZeRO-3 (from the launcher's config, seen once the arguments are built) is refused:
    tried on the CPU with deepspeed 0.19.8, the LoRA-target check's meta-device skeleton fails inside
    ZeRO-3's weight init ("Cannot copy out of meta tensor"), and past it the adapter's health reads
    empty partitions (B "non-zero in 0 of 59") and the tiny base is saved as empty tensors."""
    from transformers import integrations

    if integrations.is_deepspeed_zero3_enabled():
        raise TuneproofError(
            "DeepSpeed ZeRO-3 is not supported by train: the adapter's health would be read from empty "
            "partitions",
            "launch with accelerate's FSDP2 config instead: docs/train.md shows one",
        )


def _in_process_group() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _leave_process_group(owned: bool) -> None:
    """Under torchrun every rank waits here for the others (rank 0 writes the report after training),
    then the process group the run started (`owned`) is torn down: a rank that exits with gloo's
    threads still live aborts ("terminate called without an active exception", SIGABRT: seen once in
    CI as rank 1 left while rank 0 was still writing). A group the caller made is left to the caller.
    Only on success: a failing rank exits and torchrun stops the rest."""
    import torch.distributed as dist

    if _in_process_group():
        dist.barrier()
        if owned:
            dist.destroy_process_group()


def _set_up(plan: TrainPlan) -> tuple[Any, Any, Path | None]:
    """(trainer, its TuneproofCallback, the base's folder): the weights loaded, the run folder's
    recipe and tiny base written, the LoRA applied once, the Trainer built. A failure here removes
    what it wrote, so the folder is left as it was."""
    from transformers import set_seed

    from tuneproof.train.bucketing import use_bucketing
    from tuneproof.train.callback import TuneproofCallback

    load_attention = "sdpa" if plan.attention == "flex_attention" else plan.attention
    model = base_model(plan.recipe, load_attention, plan.folder, plan.tokenizer)
    written = Written()
    try:
        folder = _write_run_folder(plan, model, written)
        set_seed(
            plan.recipe.optim.seed
        )  # lora_A's init draws from the global RNG, before the Trainer seeds it
        trainer = build_trainer(attach_lora(model, plan.recipe), plan.tokenizer, plan.recipe, plan.data,
                                plan.out, plan.cuda, plan.quiet, plan.args)  # fmt: skip
    except BaseException:
        written.remove()
        raise
    quiet_logs(trainer, bar=not plan.quiet)
    sampler = use_bucketing(trainer)
    # the callback's own fingerprint (into the checkpoints folder) is off: the adapter folder gets one
    callback = TuneproofCallback(widths=sampler.widths(), record_base=False)
    trainer.add_callback(callback)
    return trainer, callback, folder


def _write_run_folder(plan: TrainPlan, model: Any, written: Written) -> Path | None:
    """OUT/recipe.toml and, for the tiny model (in memory only), OUT/base with its tokenizer: a whole
    model folder to train or merge from. Returns the base's folder (None on the other ranks for the
    tiny model: they write nothing)."""
    from tuneproof.core.io import atomic_write_text

    if not plan.main:
        return plan.folder
    written.add(plan.out)
    plan.out.mkdir(parents=True, exist_ok=True)
    written.add(plan.out / RECIPE_NAME)
    atomic_write_text(plan.out / RECIPE_NAME, plan.recipe.to_toml())
    if plan.folder is not None:
        return plan.folder
    folder = plan.out / "base"
    if not folder.is_dir():
        written.add(folder)
        model.save_pretrained(folder)
        plan.tokenizer.save_pretrained(folder)
    # PEFT records the name as the adapter's base (adapter_config.json: lora check, merge)
    model.config._name_or_path = model.name_or_path = str(folder.resolve())
    return folder


def _train(plan: TrainPlan, trainer: Any, callback: Any) -> Any:
    """trainer.train(), from the last complete checkpoint when resuming, inside the flex guard when
    training with flex_attention."""
    import torch

    checkpoint = last_checkpoint(plan.out) if plan.resume else None
    if plan.resume and checkpoint is None and plan.main:  # stopped before its first complete checkpoint
        warnings.warn(
            f"tuneproof: {plan.out} holds no complete checkpoint yet: training from step 0", stacklevel=3
        )
    start = str(checkpoint) if checkpoint is not None else None
    if plan.attention != "flex_attention":
        return trainer.train(resume_from_checkpoint=start)
    from tuneproof.attention.flex import enable_flex

    capability = tuple(torch.cuda.get_device_capability()) if plan.cuda else None
    # the guard is sized from the sampler's widths (the callback was given them)
    with enable_flex(trainer.model.get_base_model(), callback.widths, capability=capability):  # type: ignore[arg-type]
        return trainer.train(resume_from_checkpoint=start)


def _save(
    plan: TrainPlan, trainer: Any, callback: Any, folder: Path | None, adapter_dir: Path, kept: dict[str, Any]
) -> TrainResult:
    """The main process's outputs after training: run_state.json, the base's fingerprint in the
    adapter folder, and the adapter's health (warned about when it did not train everywhere)."""
    from tuneproof.core.io import atomic_write_text
    from tuneproof.train.artefacts import write_base_fingerprint

    write_state(plan.out, trainer.state.global_step, trainer.state.max_steps)
    fingerprint = write_base_fingerprint(folder, str(folder or ""), adapter_dir)
    health = callback.health.summary() if callback.health is not None else None
    health_file = None
    if callback.health is not None:
        h = callback.health
        if h.untrained or h.idle_expert_count:
            warnings.warn(
                f"tuneproof: the adapter did not train everywhere: {health} (too few steps, or a learning "
                "rate still at 0 in warmup?)",
                stacklevel=3,
            )
        elif h.healthy is False:  # NaN, or a rank above a matrix's width: what the verdict says
            warnings.warn(f"tuneproof: the adapter is not healthy: {h.verdict.reason}", stacklevel=3)
        health_file = atomic_write_text(
            plan.out / "adapter_health.json", json.dumps({"summary": health}, indent=2) + "\n"
        )
    return TrainResult(
        output_dir=plan.out,
        adapter_dir=adapter_dir,
        health=health,
        fingerprint=fingerprint,
        health_file=health_file,
        **kept,
    )


def _processes(trainer: Any, callback: Any) -> dict[str, Any] | None:
    """A run on several processes: how it was distributed (accelerate's distributed type, FSDP's
    version, whether the weights are sharded) and what each rank's own callback billed: the steps of
    its own micro-batches (their real tokens, token slots and FLOPs), gathered from every rank. None
    on one process. Every rank must call it (an all-gather)."""
    from dataclasses import asdict

    import torch.distributed as dist

    if not _in_process_group() or dist.get_world_size() == 1:
        return None
    mine = {"rank": dist.get_rank(), "steps": [asdict(s) for s in callback.history]}
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    for rank in ranks:
        steps = rank["steps"]
        rank.update({key: sum(s[key] for s in steps) for key in ("tokens", "slots", "intended", "performed")})
    from torch.distributed.tensor import DTensor

    state = trainer.accelerator.state
    fsdp = getattr(state, "fsdp_plugin", None)
    return {
        "distributed_type": str(state.distributed_type).split(".")[-1],
        "fsdp_version": int(fsdp.fsdp_version) if fsdp is not None else None,
        "sharded": any(isinstance(p, DTensor) for p in trainer.model.parameters()),  # FSDP2's shards
        "num_processes": dist.get_world_size(),
        "ranks": ranks,
    }


def _report_facts(trainer: Any) -> dict[str, Any]:
    """What the report needs from the trainer, kept so the trainer (and its model) can be freed."""
    from tuneproof.train.bucketing import dataset_lengths

    return {
        "config": trainer.model.get_base_model().config,
        "lengths": [int(n) for n in dataset_lengths(trainer.train_dataset)],
        "log_history": trainer.state.log_history,
    }


def _free(cuda: bool) -> None:
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def report_sections(
    config: Any,
    recipe: Any,
    attention: str,
    device: str,
    lengths: list[int],
    callback: Any,
    progress: Callable[[str], None] | None = None,
    deadline: Deadline | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(sections as the report's plots read them, notes on what could not be measured and why); under
    the command's `deadline`, the probe gets what is left of it, at most its own budget."""
    import numpy as np

    from tuneproof.arch import resolve
    from tuneproof.data.compare import compare

    resolved = resolve(config)
    sections: dict[str, Any] = {}
    notes: list[str] = []
    typical = callback.typical_micro_batch()
    if typical is not None:
        sections["flops"] = {"detail": typical.to_dict(), "what": "one real micro-batch at the median width"}
    else:
        notes.append("no FLOP waterfall: the callback saw no training step")
    opt = recipe.optim
    ledger_attn = "sdpa" if attention == "auto" else attention
    results, _ = compare(
        np.asarray(lengths), None, opt.micro_batch, opt.grad_accum, shape=resolved.shape, attn=ledger_attn,
        seed=opt.seed,
    )  # fmt: skip
    sections["batching"] = {
        "samplers": {r.name: r.to_dict() for r in results},
        "num_lengths": len(lengths),
        "what": "the run's own token lengths",
        "used": "bucketed (tuneproof's BucketBatchSampler)",
    }
    probe, reason = _probe(resolved, recipe, attention, device, lengths, progress, deadline)
    if probe is not None:
        sections["probe"] = probe
    else:
        notes.append(f"no scaling fit or kernel classes: {reason}")
    return sections, notes


def _probe(
    resolved: Any,
    recipe: Any,
    attention: str,
    device: str,
    lengths: list[int],
    progress: Callable[[str], None] | None,
    deadline: Deadline | None = None,
) -> tuple[dict[str, Any] | None, str]:
    from tuneproof.commands import probe

    # a side measurement: a floor past its budget is refused (the report says why), never run
    budget, over = float(recipe.run.probe_budget_s), "refuse"
    if budget <= 0:
        return None, "run.probe_budget_s is 0 (the probe is off)"
    if deadline is not None:  # the command's budget is a promise, and the probe's floor is only known
        # after a build, a warm-up and a round (22 s on a busy 2-core machine): it runs only with room
        # for twice its own budget, and refuses a floor past that
        left = deadline.budget_s - deadline.elapsed()
        if left < 2 * budget:
            return None, (
                f"{left:.0f} s of the command's {deadline.budget_s:g} s budget were left, under twice "
                f"the probe's {budget:g} s: the probe was not started (`tuneproof probe` measures it apart)"
            )
    widths = probe_widths(lengths)
    if widths is None:
        return None, f"the run's widest sequence ({max(lengths)} tokens) is too short to fit a scaling law"
    try:
        spec = probe.ProbeSpec.of(
            model=resolved, attn=attention, widths=widths, batch=recipe.optim.micro_batch, mode="lora",
            grad_ckpt=recipe.optim.grad_ckpt, device=device, lora_rank=recipe.lora.r, budget_s=budget,
            seed=recipe.optim.seed, lora_targets=run_targets(resolved, recipe.lora.targets),
            over_budget=over,
        )  # fmt: skip
        if progress:
            progress(f"probing the step time at widths {', '.join(map(str, widths))} ({budget:.3g} s)")
        return probe.run(probe.prepare(spec), notice=progress).to_dict(), ""
    except TuneproofError as e:
        return None, f"the probe cannot run here: {e.message}"


def run_targets(resolved: Any, targets: str | list[str]) -> tuple[str, ...] | None:
    """The run's LoRA targets as the probe takes them (module paths inside a layer), matched the way
    PEFT matches a list of names (the whole path, or its last components); None for all-linear."""
    from tuneproof.measure.model import lora_targets

    if isinstance(targets, str):
        return None  # "all-linear": every linear but the head, the probe's own default
    names = lora_targets(resolved.shape)
    return tuple(n for n in names if peft_matches(n, targets)) or None


def write_run_report(
    folder: Path,
    recipe: Any,
    attention: str,
    cuda: bool,
    callback: Any,
    health: str | None,
    progress: Callable[[str], None] | None,
    *,
    config: Any,
    lengths: list[int],
    log_history: list[dict[str, Any]],
    processes: dict[str, Any] | None = None,
    deadline: Deadline | None = None,
) -> Path:
    """report.md / report.json / PNGs in `folder`: loss and the two MFUs per logging step, every
    step's FLOPs (the callback's history), and the run's own FLOP waterfall, scaling fit, kernel
    classes and samplers (`report_sections`); on several processes, each rank's own billing
    (`processes`: its micro-batches' tokens and FLOPs; `steps` are rank 0's). Returns report.md's path."""
    from dataclasses import asdict

    from tuneproof.core.report import train_plots, write_report

    device = "cuda" if cuda else "cpu"
    sections, notes = report_sections(
        config, recipe, attention, device, lengths, callback, progress, deadline
    )
    data = {
        "recipe": recipe.to_toml(),
        "log_history": log_history,
        "steps": [asdict(s) for s in callback.history],
        "adapter_health": health,
        "sections": sections,
        "notes": notes,
        "processes": processes,
    }
    summary = [
        f"Adapter health: {health or 'unknown'}.",
        *(f"Not measured: {note}." for note in notes),
        *([_processes_line(processes)] if processes else []),
        "Every logged value, every step's FLOPs and every plot's data are in report.json.",
    ]
    write_report(folder, "tuneproof train", data, train_plots(log_history, sections), summary)
    return folder / "report.md"


def _processes_line(processes: dict[str, Any]) -> str:
    """One sentence on a run over several processes: how, and each rank's own real tokens."""
    how = processes["distributed_type"]
    if processes["fsdp_version"] is not None:
        how += f" {processes['fsdp_version']}"
    tokens = ", ".join(f"rank {r['rank']} {r['tokens']:,}" for r in processes["ranks"])
    return (
        f"Trained on {processes['num_processes']} processes ({how}); each rank billed its own "
        f"micro-batches (real tokens: {tokens}); report.json has every rank's steps, its steps are rank 0's."
    )
