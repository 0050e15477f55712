"""A training recipe: what `tuneproof train` runs, every default written out.

    [model]  name = "tiny"            # a local folder with config.json + safetensors, or "tiny"
    [data]   path = "train.jsonl"     # JSONL, Parquet, or a saved `datasets` folder; or "tiny"
             text_field = "text"      # or chat rows under "messages" (through the chat template)
             max_length = 512
             assistant_only_loss = true  # chat rows: loss on the assistant's turns only (TRL SFTTrainer)
    [lora]   r = 16, alpha = 32, targets = "all-linear", target_parameters = [], rslora = false
    [optim]  lr = 2e-4, schedule = "cosine", warmup_ratio = 0.03, epochs = 1, max_steps = -1,
             micro_batch = 2, grad_accum = 4, grad_ckpt = false, seed = 0
    [run]    attention = "auto", output_dir = "tuneproof-run", logging_steps = 1, save_steps = 50,
             probe_budget_s = 20.0

Unknown keys are refused with the nearest valid one; every value is checked before anything loads.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.io import input_file

ATTENTION = ("auto", "sdpa", "eager", "flex_attention")
SCHEDULES = ("cosine", "linear", "constant", "constant_with_warmup")
TINY = "tiny"


@dataclass(frozen=True, slots=True)
class ModelPart:
    name: str = TINY


@dataclass(kw_only=True, frozen=True, slots=True)
class DataPart:
    path: str = TINY
    text_field: str = "text"
    max_length: int = 512
    assistant_only_loss: bool = True  # chat rows: the loss on the assistant's turns only (TRL's SFTTrainer)


@dataclass(kw_only=True, frozen=True, slots=True)
class LoraPart:
    r: int = 16
    alpha: float = 32.0
    targets: str | list[str] = "all-linear"
    target_parameters: list[str] = field(default_factory=list)
    rslora: bool = False


@dataclass(kw_only=True, frozen=True, slots=True)
class OptimPart:
    lr: float = 2e-4
    schedule: str = "cosine"
    warmup_ratio: float = 0.03
    epochs: float = 1.0
    max_steps: int = -1
    micro_batch: int = 2
    grad_accum: int = 4
    grad_ckpt: bool = False
    seed: int = 0


@dataclass(kw_only=True, frozen=True, slots=True)
class RunPart:
    attention: str = "auto"
    output_dir: str = "tuneproof-run"
    logging_steps: int = 1
    save_steps: int = 50  # a checkpoint every this many optimizer steps (what --resume continues from)
    probe_budget_s: float = 20.0  # timing seconds for the report's scaling fit after training; 0: no probe


@dataclass(kw_only=True, frozen=True, slots=True)
class Recipe:
    model: ModelPart = field(default_factory=ModelPart)
    data: DataPart = field(default_factory=DataPart)
    lora: LoraPart = field(default_factory=LoraPart)
    optim: OptimPart = field(default_factory=OptimPart)
    run: RunPart = field(default_factory=RunPart)
    source: str = "the embedded default"

    def to_toml(self) -> str:
        """The recipe as resolved, every default filled in (written to the output folder)."""
        lines = [f"# tuneproof train recipe, resolved from {self.source}"]
        for part in ("model", "data", "lora", "optim", "run"):
            lines.append(f"\n[{part}]")
            for key, value in asdict(getattr(self, part)).items():
                lines.append(f"{key} = {_toml(value)}")
        return "\n".join(lines) + "\n"


PARTS = {"model": ModelPart, "data": DataPart, "lora": LoraPart, "optim": OptimPart, "run": RunPart}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def read_recipe(path: Path | None) -> Recipe:
    """The recipe at `path` (TOML), or the embedded default when None."""
    if path is None:
        return Recipe()
    input_file(path, "recipe", "pass a TOML recipe (docs/train.md lists its keys)")
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise TuneproofError(
            f"cannot read recipe {path}: {getattr(e, 'strerror', None) or e}", "pass a TOML file"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise TuneproofError(f"recipe {path} is not TOML: {e}", "fix the recipe") from None
    if not data:
        raise TuneproofError(
            f"recipe {path} is empty: every value would be the embedded demo's",
            "set [model] name and [data] path, or run `tuneproof train` without a recipe for the demo",
        )
    recipe = from_dict(data, str(path))
    return _relative_to(recipe, Path(path).resolve().parent)


def _relative_to(recipe: Recipe, folder: Path) -> Recipe:
    """data.path, when relative, is read from the recipe's own folder, and so is model.name when that
    folder holds it (else the name stays as written: a hub id is named as such in the error). The
    resolved recipe written to the run records the absolute paths."""
    from dataclasses import replace

    def absolute(value: str) -> str:
        return value if value == TINY or Path(value).is_absolute() else str(folder / value)

    model = absolute(recipe.model.name)
    return replace(
        recipe,
        model=replace(recipe.model, name=model if Path(model).exists() else recipe.model.name),
        data=replace(recipe.data, path=absolute(recipe.data.path)),
    )


# Names the same setting has in transformers' TrainingArguments, PEFT's LoraConfig and Axolotl, which
# people write out of habit: each is answered with this recipe's key, not with the nearest spelling
# (`optim.learning_rate` is `optim.lr`, never `optim.warmup_ratio`).
ALIASES = {
    "learning_rate": "lr", "lr_scheduler_type": "schedule", "lr_scheduler": "schedule",
    "num_train_epochs": "epochs", "num_epochs": "epochs", "warmup": "warmup_ratio",
    "per_device_train_batch_size": "micro_batch", "micro_batch_size": "micro_batch",
    "batch_size": "micro_batch",
    "gradient_accumulation_steps": "grad_accum", "gradient_checkpointing": "grad_ckpt",
    "lora_r": "r", "rank": "r", "lora_alpha": "alpha", "target_modules": "targets",
    "lora_target_modules": "targets", "use_rslora": "rslora", "max_seq_length": "max_length",
    "sequence_len": "max_length", "seq_len": "max_length", "attn_implementation": "attention",
    "dataset": "path", "base_model": "name",
}  # fmt: skip


def from_dict(data: dict[str, Any], source: str) -> Recipe:
    unknown = sorted(set(data) - set(PARTS))
    if unknown:
        raise _unknown(source, unknown[0], list(PARTS), "section")
    parts = {}
    for name, cls in PARTS.items():
        section = data.get(name, {})
        if not isinstance(section, dict):
            raise TuneproofError(f"{source}: [{name}] is not a table", f"write it as a [{name}] section")
        known = [f.name for f in fields(cls)]
        for key in section:
            if key not in known:
                valid = [f"{name}.{k}" for k in known]
                alias = ALIASES.get(key)
                where = next((p for p, c in PARTS.items() if alias in {f.name for f in fields(c)}), name)
                if alias is not None:
                    raise TuneproofError(
                        f"{source}: unknown key '{name}.{key}'", f"this recipe calls it {where}.{alias}"
                    )
                raise _unknown(source, f"{name}.{key}", valid, "key")
        parts[name] = cls(**section)
    recipe = Recipe(**parts, source=source)
    check(recipe, source)
    return recipe


def _unknown(source: str, key: str, valid: list[str], what: str) -> TuneproofError:
    near = difflib.get_close_matches(key, valid, n=1)
    hint = f"did you mean {near[0]!r}?" if near else f"valid: {', '.join(valid)}"
    return TuneproofError(f"{source}: unknown {what} {key!r}", hint)


def _number(source: str, key: str, value: Any, *, integer: bool, low: float, high: float = math.inf) -> None:
    kinds = int if integer else int | float
    ok = (
        isinstance(value, kinds)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )
    if not ok:
        what = "an integer" if integer else "a number"
        raise TuneproofError(
            f"{source}: {key} is {value!r}", f"{key} must be {what} from {low:g} to {high:g}"
        )


def check(r: Recipe, source: str) -> None:
    if not isinstance(r.model.name, str) or not r.model.name:
        raise TuneproofError(f"{source}: model.name is {r.model.name!r}", "a local model folder, or 'tiny'")
    for key, value in (("data.path", r.data.path), ("data.text_field", r.data.text_field)):
        if not isinstance(value, str) or not value:
            raise TuneproofError(f"{source}: {key} is {value!r}", f"{key} must be a non-empty string")
    _number(source, "data.max_length", r.data.max_length, integer=True, low=2, high=1 << 20)
    _number(source, "lora.r", r.lora.r, integer=True, low=1, high=4096)
    _number(source, "lora.alpha", r.lora.alpha, integer=False, low=1e-9)
    targets = r.lora.targets
    if isinstance(targets, str) and targets not in ("all-linear", ""):
        raise TuneproofError(
            f"{source}: lora.targets is the string {targets!r}: PEFT reads a string as a regular expression "
            "over whole module paths, which that name does not match",
            f'write a list: targets = ["{targets}"] (or "all-linear")',
        )
    if not (isinstance(targets, str) and targets) and not (
        isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets)
    ):
        raise TuneproofError(
            f"{source}: lora.targets is {targets!r}", "'all-linear' or a list of module names"
        )
    if not isinstance(r.lora.target_parameters, list) or not all(
        isinstance(t, str) for t in r.lora.target_parameters
    ):
        raise TuneproofError(
            f"{source}: lora.target_parameters is {r.lora.target_parameters!r}",
            "a list of parameter paths, e.g. ['mlp.experts.gate_up_proj']",
        )
    _number(source, "optim.lr", r.optim.lr, integer=False, low=1e-12, high=10)
    if r.optim.schedule not in SCHEDULES:
        raise _unknown(source, r.optim.schedule, list(SCHEDULES), "optim.schedule")
    _number(source, "optim.warmup_ratio", r.optim.warmup_ratio, integer=False, low=0, high=0.99)
    _number(source, "optim.epochs", r.optim.epochs, integer=False, low=1e-9, high=1e6)
    if r.optim.max_steps != -1:
        _number(source, "optim.max_steps", r.optim.max_steps, integer=True, low=1, high=1e9)
    _number(source, "optim.micro_batch", r.optim.micro_batch, integer=True, low=1, high=1 << 16)
    _number(source, "optim.grad_accum", r.optim.grad_accum, integer=True, low=1, high=1 << 16)
    _number(source, "optim.seed", r.optim.seed, integer=True, low=0, high=2**32 - 1)
    _number(source, "run.logging_steps", r.run.logging_steps, integer=True, low=1, high=1e9)
    _number(source, "run.save_steps", r.run.save_steps, integer=True, low=1, high=1e9)
    _number(source, "run.probe_budget_s", r.run.probe_budget_s, integer=False, low=0, high=86400)
    flags = (("lora.rslora", r.lora.rslora), ("optim.grad_ckpt", r.optim.grad_ckpt),
             ("data.assistant_only_loss", r.data.assistant_only_loss))  # fmt: skip
    for key, flag in flags:
        if not isinstance(flag, bool):
            raise TuneproofError(f"{source}: {key} is {flag!r}", f"{key} is true or false")
    if r.run.attention not in ATTENTION:
        raise _unknown(source, r.run.attention, list(ATTENTION), "run.attention")
    if not isinstance(r.run.output_dir, str) or not r.run.output_dir:
        raise TuneproofError(f"{source}: run.output_dir is {r.run.output_dir!r}", "pass a folder path")
