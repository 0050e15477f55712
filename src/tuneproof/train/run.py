"""`tuneproof train`: a thin runner on transformers' `Trainer` + PEFT with every CASE fix on.

Nothing here is a training loop or a launcher: the Trainer trains, `torchrun` / `accelerate launch`
start the processes (`torchrun --nproc-per-node N -m tuneproof train R.toml`). What this adds:
- batches from `BucketBatchSampler` (`use_bucketing`), padded to each micro-batch's own longest row;
- attention `auto`: sdpa on the CPU, flex_attention with safe kernel options and a recompile guard
  sized from the sampler's widths on CUDA (`enable_flex`);
- `TuneproofCallback`: intended and performed FLOPs and MFU in the logs, first-step warnings;
- at the end: the adapter (PEFT `save_pretrained`), its health, and the base's fingerprint beside it
  (`adapter/base_fingerprint.json`, what `tuneproof merge` checks).

The embedded default (no recipe) trains the tiny model on `tiny_corpus.jsonl` (generated sentences
shipped with the package) on the CPU in about a minute. The tiny base is saved next to the run, so
the adapter can be checked and merged like any other.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuneproof.data.collate import RowsDataset
from tuneproof.errors import TuneproofError
from tuneproof.extras import require
from tuneproof.train.recipe import TINY, Recipe

RECIPE_NAME = "recipe.toml"
TINY_CORPUS = Path(__file__).parent / "tiny_corpus.jsonl"


@dataclass(frozen=True, slots=True)
class TrainResult:
    output_dir: Path
    adapter_dir: Path
    steps: int
    loss: float
    health: str | None
    fingerprint: Path | None
    attention: str
    main: bool = True  # the process that wrote the outputs (rank 0); others print nothing


def check_output(out: Path, recipe: Recipe, resume: bool) -> None:
    """Nothing is overwritten: an output folder holding another run (another resolved recipe) is
    refused, the same run too unless resuming, and a non-empty folder that is no run."""
    if out.exists() and not out.is_dir():
        raise TuneproofError(f"{out} is a file", "pass a folder for the run")
    previous = out / RECIPE_NAME
    if previous.is_file():
        differs = _first_difference(previous, recipe)
        if differs:
            raise TuneproofError(
                f"{out} holds a different run (its {RECIPE_NAME} differs from this recipe: {differs})",
                "pass another output folder",
            )
        if _finished(out):
            raise TuneproofError(
                f"{out} holds this run finished (all its steps trained, the adapter saved)",
                "pass another folder to train again",
            )
        if not resume:
            raise TuneproofError(
                f"{out} holds this run already",
                "resume it ({resume}), or pass another folder",
                fields=("resume",),
            )
    elif resume:
        raise TuneproofError(
            f"{out} holds no run to resume", "drop {resume} or pass the run's folder", fields=("resume",)
        )
    elif out.is_dir() and any(out.iterdir()):
        raise TuneproofError(f"{out} is not empty and holds no tuneproof run", "pass a new or empty folder")
    from tuneproof.io import check_out_folder

    check_out_folder(out)  # creatable and writable, probed before the model loads


def _first_difference(previous: Path, recipe: Recipe) -> str:
    """The first key whose value differs between the run folder's recipe and this one ("" if none);
    where the recipe was read from and the output folder's own path do not count (a copied run is
    the same run)."""
    import tomllib

    try:
        old = tomllib.loads(previous.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return f"{previous.name} cannot be read"
    new = tomllib.loads(recipe.to_toml())
    for part in sorted(set(old) | set(new)):
        for key in sorted(set(old.get(part, {})) | set(new.get(part, {}))):
            if (part, key) == ("run", "output_dir"):
                continue
            a, b = old.get(part, {}).get(key), new.get(part, {}).get(key)
            if a != b:
                return f"{part}.{key} was {a!r}, now {b!r}"
    return ""


STATE_NAME = "run_state.json"  # written at the end: the steps trained of the steps planned


def _finished(out: Path) -> bool:
    try:
        state = json.loads((out / STATE_NAME).read_text())
    except (OSError, ValueError):
        return False
    return bool(isinstance(state, dict) and state.get("finished"))


def last_checkpoint(out: Path) -> Path | None:
    """The newest complete checkpoint (its trainer_state.json written last by the Trainer): one cut
    short by Ctrl-C during its save is passed over."""
    folder = out / "checkpoints"
    found = []
    for p in folder.glob("checkpoint-*") if folder.is_dir() else []:
        step = p.name.rsplit("-", 1)[-1]
        if step.isdigit() and (p / "trainer_state.json").is_file():
            found.append((int(step), p))
    return max(found)[1] if found else None


def read_records(recipe: Recipe) -> list[dict[str, Any]]:
    """The dataset's rows, checked before any model loads: it exists, and its rows have the text field,
    or all have chat `messages`."""
    path = TINY_CORPUS if recipe.data.path == TINY else Path(recipe.data.path)
    records = _records(path)
    if not records:
        raise TuneproofError(f"dataset {path} is empty", "pass a dataset with rows")
    field = recipe.data.text_field
    if is_chat(records):
        for i, rec in enumerate(records, 1):
            _check_chat(path, i, rec, recipe.data.assistant_only_loss)
        return records
    for i, rec in enumerate(records, 1):
        if isinstance(rec.get(field), str):
            continue
        if isinstance(rec.get("messages"), list):
            raise TuneproofError(
                f"{path}: row {i} is a chat ('messages'), but row 1 is text",
                "make every row a chat ('messages') or every row text",
            )
        if field in rec:
            raise TuneproofError(
                f"{path}: row {i}'s {field!r} is {type(rec[field]).__name__}, not text",
                "set data.text_field to a column of strings (chat rows go under 'messages')",
            )
        keys = ", ".join(sorted(rec)) or "none"
        raise TuneproofError(
            f"{path}: row {i} has no text field {field!r} and no chat 'messages' (its keys: {keys})",
            "set data.text_field to the column holding the text",
        )
    return records


def _check_chat(path: Path, i: int, rec: dict[str, Any], assistant_only: bool) -> None:
    """A chat row: a non-empty list of {role, content} turns of strings; with assistant-only loss, at
    least one assistant turn (else the row has nothing to learn)."""
    turns = rec.get("messages")
    fix = 'every row\'s \'messages\' is a list of {"role": ..., "content": ...} turns'
    if not isinstance(turns, list):
        raise TuneproofError(f"{path}: row {i} has no chat 'messages' list, but row 1 has one",
                             "make every row a chat ('messages') or every row text")  # fmt: skip
    if not turns:
        raise TuneproofError(f"{path}: row {i}'s 'messages' is empty", fix)
    for j, turn in enumerate(turns, 1):
        ok = (
            isinstance(turn, dict)
            and isinstance(turn.get("role"), str)
            and isinstance(turn.get("content"), str)
        )
        if not ok:
            shown = sorted(turn) if isinstance(turn, dict) else type(turn).__name__
            raise TuneproofError(f"{path}: row {i}, turn {j} is not a {{role, content}} pair of strings "
                                 f"(it has: {shown})", fix)  # fmt: skip
    if assistant_only and not any(t["role"] == "assistant" for t in turns):
        raise TuneproofError(
            f"{path}: row {i} has no assistant turn: with data.assistant_only_loss nothing in it trains",
            "add the assistant's reply, drop the row, or set data.assistant_only_loss = false",
        )


def is_chat(records: list[dict[str, Any]]) -> bool:
    """Chat rows (`messages`, trained through TRL's SFTTrainer) rather than text rows."""
    return isinstance(records[0].get("messages"), list)


def tokenise(records: list[dict[str, Any]], recipe: Recipe, tokenizer: Any) -> list[dict[str, list[int]]]:
    """Token ids per text row, truncated to max_length. Rows without the text field, or shorter than
    2 tokens, are dropped; a dataset left empty is refused."""
    field = recipe.data.text_field
    rows = []
    for rec in records:
        if not isinstance(rec.get(field), str):
            continue
        ids = list(tokenizer(rec[field])["input_ids"])[: recipe.data.max_length]
        if len(ids) >= 2:
            rows.append({"input_ids": ids})
    if not rows:
        raise TuneproofError(
            f"dataset {recipe.data.path} holds no usable text", "pass a dataset with text in it"
        )
    return rows


def check_chat_template(tokenizer: Any, recipe: Recipe) -> None:
    """Chat rows need a chat template; assistant-only loss needs one with `{% generation %}` markers or
    one TRL knows a training version of (its `get_training_chat_template`)."""
    if not getattr(tokenizer, "chat_template", None):
        raise TuneproofError(
            f"the tokenizer of {recipe.model.name} has no chat template for the chat rows",
            "give the tokenizer a chat_template, or train on a text field",
        )
    if not recipe.data.assistant_only_loss:
        return
    from trl.chat_template_utils import get_training_chat_template

    try:
        get_training_chat_template(tokenizer)
    except ValueError:
        raise TuneproofError(
            f"the chat template of {recipe.model.name} has no {{% generation %}} markers and TRL knows no "
            "training version of it, so the loss cannot be kept to the assistant's turns",
            "set data.assistant_only_loss = false to train on whole conversations, or add the markers",
        ) from None


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise TuneproofError(
            f"dataset {path} not found", "set data.path to a JSONL, Parquet or saved datasets folder"
        )
    if path.is_dir():
        try:
            from datasets import load_from_disk

            return [dict(r) for r in load_from_disk(str(path))]
        except Exception as e:  # not a saved dataset folder: say what it is not
            raise TuneproofError(
                f"{path} is not a saved datasets folder: {str(e)[:200]}", "pass a JSONL file"
            ) from None
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            return [dict(r) for r in pq.read_table(path).to_pylist()]
        except Exception as e:
            raise TuneproofError(
                f"cannot read {path} as Parquet: {str(e)[:200]}", "pass a valid Parquet file"
            ) from None
    from tuneproof.gate.inputs import jsonl_objects

    return [row for _, row in jsonl_objects(path, "the dataset", "set data.path to a JSONL file")]


def load_model(recipe: Recipe, attention: str) -> tuple[Any, Any, Path | None]:
    """(model, tokenizer, base folder on disk or None)."""
    from tuneproof.arch import resolve
    from tuneproof.gate.generate import tiny_tokenizer
    from tuneproof.model import build_model

    if recipe.model.name == TINY:
        model = build_model(resolve(TINY), attention, seed=recipe.optim.seed)
        tokenizer = tiny_tokenizer()
        tokenizer.padding_side = "right"
        model.config.pad_token_id = tokenizer.pad_token_id
        return model, tokenizer, None
    folder = Path(recipe.model.name)
    if not (folder / "config.json").is_file():
        raise TuneproofError(
            f"model {folder} is not a local model folder (no config.json); nothing is downloaded",
            "pass a folder with config.json, the safetensors and a tokenizer, or 'tiny'",
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, TypeError) as e:
        raise TuneproofError(
            f"model {folder} has no tokenizer that loads ({str(e).splitlines()[0][:120]})",
            "add the base's tokenizer files (tokenizer.json, tokenizer_config.json) to the folder",
        ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, attn_implementation=attention, local_files_only=True)
    model.config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, folder


def apply_lora(model: Any, recipe: Recipe) -> Any:
    """PEFT's get_peft_model; a target that matches nothing is one line naming the candidates."""
    import torch
    from peft import LoraConfig, get_peft_model

    lora = recipe.lora
    config = LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, target_modules=lora.targets,  # type: ignore[arg-type]
        target_parameters=lora.target_parameters or None, use_rslora=lora.rslora, lora_dropout=0.0,
    )  # fmt: skip
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapped = get_peft_model(model, config)
    except ValueError as e:
        names = sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        )
        raise TuneproofError(
            f"lora.targets {lora.targets!r} match nothing in the model ({str(e).splitlines()[0][:120]})",
            f"linear modules it has: {', '.join(names)}",
        ) from None
    if lora.target_parameters:
        from peft.tuners.lora import ParamWrapper

        if not any(isinstance(m, ParamWrapper) for m in wrapped.modules()):
            params = sorted({n.split(".", 3)[-1] for n, p in model.named_parameters() if p.dim() == 3})
            raise TuneproofError(
                f"lora.target_parameters {lora.target_parameters!r} match no parameter in the model",
                f"3-D (fused expert) parameters it has: {', '.join(params) or 'none'}",
            )
    return wrapped


def train(
    recipe: Recipe,
    output_dir: Path | None = None,
    resume: bool = False,
    callbacks: list[Any] | None = None,
    quiet: bool = False,
) -> TrainResult:
    """Run the recipe; `callbacks` are extra `TrainerCallback`s for the Trainer (library use)."""
    require("train", "tuneproof train")
    import torch

    from tuneproof.integrations.callback import TuneproofCallback
    from tuneproof.integrations.hf import dataset_lengths, use_bucketing
    from tuneproof.io import atomic_write_text

    out = Path(output_dir or recipe.run.output_dir)
    import dataclasses

    recipe = dataclasses.replace(recipe, run=dataclasses.replace(recipe.run, output_dir=str(out)))
    main = int(os.environ.get("RANK", "0")) == 0  # under torchrun / accelerate, rank 0 alone writes
    if main:
        check_output(out, recipe, resume)
    cuda = torch.cuda.is_available()
    if quiet:  # stdout carries the caller's JSON and stderr stays for errors: no progress bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        try:
            import datasets

            datasets.disable_progress_bars()
        except ImportError:
            pass
    attention = recipe.run.attention
    if attention == "auto":
        attention = "flex_attention" if cuda else "sdpa"
    records = read_records(recipe)  # a missing or wrong dataset is refused before the model loads
    rows_model, tokenizer, base_folder = load_model(
        recipe, "sdpa" if attention == "flex_attention" else attention
    )
    chat = is_chat(records)
    if chat:
        check_chat_template(tokenizer, recipe)
    rows = None if chat else tokenise(records, recipe, tokenizer)
    model = apply_lora(rows_model, recipe)  # checked before anything is written
    model.unload()  # the base back as it was: saved below before the adapter goes on for training
    written: list[Path] = []  # what this run creates before training starts, removed if it fails
    try:
        if main:
            if not out.exists():
                written.append(out)
            out.mkdir(parents=True, exist_ok=True)
            if not (out / RECIPE_NAME).exists():
                written.append(out / RECIPE_NAME)
            atomic_write_text(out / RECIPE_NAME, recipe.to_toml())
        if base_folder is None and main:  # the tiny base lives only in memory: keep it, to merge onto
            base_folder = out / "base"
            if not base_folder.is_dir():
                written.append(base_folder)
                rows_model.save_pretrained(base_folder)
                tokenizer.save_pretrained(base_folder)  # a whole model folder: train or merge from it
            # the callback fingerprints it; PEFT records it as the adapter's base (lora check, merge)
            rows_model.config._name_or_path = rows_model.name_or_path = str(base_folder.resolve())
        from transformers import set_seed

        set_seed(recipe.optim.seed)  # lora_A's init draws from the global RNG, before the Trainer seeds it
        model = apply_lora(rows_model, recipe)
        trainer = build_trainer(model, tokenizer, recipe, records if chat else rows, out, cuda, quiet)
    except BaseException:
        for path in reversed(written):  # nothing half-written: the folder as it was
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        raise
    quiet_logs(trainer, bar=not quiet)
    checkpoint = last_checkpoint(out) if resume else None
    start = str(checkpoint) if checkpoint is not None else None
    if resume and checkpoint is None and main:  # stopped before its first complete checkpoint
        import warnings

        warnings.warn(
            f"tuneproof: {out} holds no complete checkpoint yet: training from step 0", stacklevel=2
        )
    sampler = use_bucketing(trainer)
    callback = TuneproofCallback(widths=sampler.widths())
    trainer.add_callback(callback)
    for extra in callbacks or []:
        trainer.add_callback(extra)
    if attention == "flex_attention":
        from tuneproof.attention.flex import enable_flex

        capability = tuple(torch.cuda.get_device_capability()) if cuda else None
        with enable_flex(model.get_base_model(), sampler.widths(), capability=capability):  # type: ignore[arg-type]
            result = trainer.train(resume_from_checkpoint=start)
    else:
        result = trainer.train(resume_from_checkpoint=start)
    adapter_dir = out / "adapter"
    trainer.save_model(str(adapter_dir))  # the main process only (the Trainer's own rule)
    main = trainer.is_world_process_zero()
    if main:  # a run stopped early (a callback, a time limit) is not finished: --resume continues it
        done = {"step": trainer.state.global_step, "max_steps": trainer.state.max_steps}
        atomic_write_text(
            out / STATE_NAME, json.dumps({**done, "finished": done["step"] >= done["max_steps"]})
        )
    fingerprint_path = _move_fingerprint(out / "checkpoints", adapter_dir) if main else None
    health = callback.health.summary() if callback.health is not None else None
    if callback.health is not None and callback.health.healthy is False and main:
        import warnings

        warnings.warn(
            f"tuneproof: the adapter did not train everywhere: {health} (too few steps, or a learning rate "
            "still at 0 in warmup?)",
            stacklevel=2,
        )
    if callback.health is not None and main:
        atomic_write_text(out / "adapter_health.json", json.dumps({"summary": health}, indent=2) + "\n")
    if main:
        log_history = trainer.state.log_history
        lengths = [int(n) for n in dataset_lengths(trainer.train_dataset)]
        config = model.get_base_model().config
        del trainer, model, rows_model  # the probe builds its own model: free this one's memory first
        _free(cuda)
        _write_report(out / "report", recipe, attention, "cuda" if cuda else "cpu", config, lengths,
                      log_history, callback, health, quiet)  # fmt: skip
    loss = float(result.training_loss)
    return TrainResult(out, adapter_dir, result.global_step, loss, health, fingerprint_path, attention, main)


def build_trainer(
    model: Any, tokenizer: Any, recipe: Recipe, data: Any, out: Path, cuda: bool, quiet: bool
) -> Any:
    """transformers' Trainer on tokenised text rows; TRL's SFTTrainer on chat records (it applies the
    chat template and, with data.assistant_only_loss, masks every token outside the assistant's turns)."""
    opt = recipe.optim
    kwargs: dict[str, Any] = dict(
        output_dir=str(out / "checkpoints"), per_device_train_batch_size=opt.micro_batch,
        gradient_accumulation_steps=opt.grad_accum, learning_rate=opt.lr, lr_scheduler_type=opt.schedule,
        warmup_steps=opt.warmup_ratio, num_train_epochs=opt.epochs, max_steps=opt.max_steps,
        activation_checkpointing=opt.grad_ckpt, seed=opt.seed, logging_steps=recipe.run.logging_steps,
        save_strategy="steps", save_steps=recipe.run.save_steps, save_total_limit=2, disable_tqdm=quiet,
        report_to=[], use_cpu=not cuda, bf16=cuda, remove_unused_columns=False, log_level="warning",
    )  # fmt: skip
    if not isinstance(data[0].get("messages"), list):
        from transformers import Trainer, TrainingArguments

        return Trainer(model=model, args=TrainingArguments(**kwargs), train_dataset=RowsDataset(data))
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    config = SFTConfig(
        **kwargs, max_length=recipe.data.max_length, assistant_only_loss=recipe.data.assistant_only_loss,
        packing=False, padding_free=False,
    )  # fmt: skip
    chats = Dataset.from_list([{"messages": r["messages"]} for r in data])
    try:
        return SFTTrainer(model=model, args=config, train_dataset=chats, processing_class=tokenizer)
    except (ValueError, RuntimeError, IndexError, KeyError, TypeError) as e:
        raise TuneproofError(
            f"TRL's SFTTrainer cannot prepare the chat rows: {str(e).splitlines()[0][:200]}",
            "check the rows' 'messages' against the model's chat template",
        ) from None


def quiet_logs(trainer: Any, bar: bool) -> None:
    """stdout carries the summary (or the caller's JSON): the Trainer's printed log dicts go (they are
    in trainer_state.json and the report), and its progress bar stays on stderr when `bar`."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    class BarOnly(ProgressCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
            return None  # ProgressCallback writes every log dict to stdout (tqdm.write)

    trainer.remove_callback(ProgressCallback)
    trainer.remove_callback(PrinterCallback)
    if bar:
        trainer.add_callback(BarOnly())


def _free(cuda: bool) -> None:
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()


def _write_report(
    folder: Path,
    recipe: Recipe,
    attention: str,
    device: str,
    config: Any,
    lengths: list[int],
    log_history: list[dict[str, Any]],
    callback: Any,
    health: str | None,
    quiet: bool,
) -> None:
    """report.md / report.json / PNGs: loss and the two MFUs per logging step, every step's FLOPs, and
    the run's own FLOP waterfall, scaling fit, kernel classes and samplers (`sections`)."""
    import sys
    from dataclasses import asdict

    from tuneproof.report import train_plots, write_report
    from tuneproof.train.sections import report_sections

    def progress(line: str) -> None:
        if not quiet:
            print(f"tuneproof: {line}", file=sys.stderr, flush=True)

    sections, notes = report_sections(config, recipe, attention, device, lengths, callback, progress)
    data = {
        "recipe": recipe.to_toml(),
        "log_history": log_history,
        "steps": [asdict(s) for s in callback.history],
        "adapter_health": health,
        "sections": sections,
        "notes": notes,
    }
    summary = [
        f"Adapter health: {health or 'unknown'}.",
        *(f"Not measured: {note}." for note in notes),
        "Every logged value, every step's FLOPs and every plot's data are in report.json.",
    ]
    write_report(folder, "tuneproof train", data, train_plots(log_history, sections), summary)


def _move_fingerprint(checkpoints: Path, adapter_dir: Path) -> Path | None:
    """The callback writes the base's fingerprint into the Trainer's output_dir at train end; the
    adapter folder is where `tuneproof merge` looks for it."""
    from tuneproof.ship.identity import FINGERPRINT_NAME

    written = checkpoints / FINGERPRINT_NAME
    if not written.is_file():
        return None
    return Path(shutil.move(str(written), str(adapter_dir / FINGERPRINT_NAME)))
