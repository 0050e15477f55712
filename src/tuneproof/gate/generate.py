"""An arm file from a model, with transformers' own `generate` (the engine of `tuneproof generate`,
`tuneproof.commands.generate`).

Run r samples with seed `seed + r` (recorded on every row and in the sidecar), so the runs are
independent repetitions and the gate can measure the instrument's noise from them. Each prompt gets
`samples` responses per run (`num_return_sequences`). Prompts are batched with left padding; the batch
size is recorded because sampling draws depend on it.

`tiny` is the embedded Gemma-4-style model with random weights (seed 0) and a byte-level tokenizer built
in memory: its text is noise, which is what a test of the plumbing needs.

As the command runs it: `prepare(spec)` checks the model and adapter folders, reads the prompts and
checks both output paths; `run(plan, progress)` generates, writes the arm and its sidecar atomically and
returns a `GenerateResult` (its `to_dict()` is the sidecar).
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tuneproof.core import validate
from tuneproof.core.errors import TuneproofError
from tuneproof.core.extras import require
from tuneproof.core.progress import Progress
from tuneproof.gate.inputs import jsonl_objects
from tuneproof.gate.tokens import TOKENIZER_FILES

PROMPTS_HINT = (
    'one JSON object per line: {"prompt_id": ..., "prompt": ...} or {"prompt_id": ..., "messages": [...]}'
)
# The assistant's turns (their closing newline included) sit inside {% generation %} markers: TRL's
# SFTTrainer keeps the loss to them (assistant_only_loss); rendering is unchanged by the markers.
TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}\n{% endgeneration %}"
    "{% else %}{{ m['content'] }}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@dataclass(kw_only=True, frozen=True, slots=True)
class GenerateSpec:
    model: str
    prompts: str
    runs: int = 2
    samples: int = 4
    adapter: str | None = None
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    batch_size: int = 8
    seed: int = 0
    out: Path | None = None  # the arm's JSONL (its ARM.meta.json goes beside it); the command needs one

    def __post_init__(self) -> None:
        validate.integer("runs", self.runs, low=1, high=1000)
        validate.integer("samples", self.samples, low=1, high=1000)
        validate.integer("max_new_tokens", self.max_new_tokens, low=1, high=1_000_000)
        validate.real("temperature", self.temperature, low=0, high=100)
        validate.real("top_p", self.top_p, low=0, low_open=True, high=1)
        validate.integer("batch_size", self.batch_size, low=1, high=4096)
        validate.integer("seed", self.seed, low=0, high=2**32 - 1 - 1000)
        if self.temperature == 0 and self.samples > 1:
            raise TuneproofError(
                f"{{temperature}} 0 (greedy) gives one response per prompt; got {{samples}} {self.samples}",
                "sample with a temperature > 0, or pass {samples} 1",
                fields=("temperature", "samples"),
            )
        if not self.model.strip():
            raise TuneproofError("{model} is empty", "pass a local model folder or 'tiny'", fields=("model",))


def check_paths(spec: GenerateSpec) -> None:
    """Refuse a missing model or adapter folder, or an adapter without PEFT, before anything is loaded."""
    if spec.adapter is not None:
        require("train", "generating with an adapter", ("peft",))
    if spec.model != "tiny" and not Path(spec.model).is_dir():
        raise TuneproofError(f"model folder not found: {spec.model}", "pass a local model folder or 'tiny'")
    if spec.model != "tiny":
        folder = Path(spec.model)
        weights = any(folder.glob("*.safetensors")) or any(folder.glob("*.bin"))
        checks = (
            ("config.json", (folder / "config.json").is_file()),
            ("weights (*.safetensors or *.bin)", weights),
            ("tokenizer files", any((folder / name).is_file() for name in TOKENIZER_FILES)),
        )
        missing = [what for what, found in checks if not found]
        if missing:
            raise TuneproofError(
                f"{folder} holds no {', no '.join(missing)}",
                "pass the folder a transformers model and its tokenizer were saved to, or 'tiny'",
            )
    if spec.adapter is not None and not (Path(spec.adapter) / "adapter_config.json").is_file():
        raise TuneproofError(f"{spec.adapter} holds no adapter_config.json", "pass a PEFT adapter folder")


@dataclass(frozen=True, slots=True)
class Prompt:
    prompt_id: str
    prompt: str | None
    messages: list[dict[str, Any]] | None


def read_prompts(path: str | Path) -> list[Prompt]:
    p = Path(path)
    out: list[Prompt] = []
    seen: set[str] = set()
    for line_no, row in jsonl_objects(p, "prompts file", PROMPTS_HINT):
        where = f"{p}, line {line_no}"
        pid = row.get("prompt_id")
        if isinstance(pid, bool) or not isinstance(pid, str | int) or pid == "":
            raise TuneproofError(f"{where}: no 'prompt_id' (a non-empty string)", PROMPTS_HINT)
        pid = str(pid)
        if pid in seen:
            raise TuneproofError(f"{where}: prompt_id {pid!r} appears twice", "give each prompt its own id")
        seen.add(pid)
        prompt, messages = row.get("prompt"), row.get("messages")
        if "prompt" in row and "messages" in row:
            raise TuneproofError(f"{where}: has both 'prompt' and 'messages'", "give one of them")
        if isinstance(prompt, str) and prompt:
            out.append(Prompt(pid, prompt, None))
        elif _is_messages(messages):
            out.append(Prompt(pid, None, messages))
        else:
            raise TuneproofError(
                f"{where}: needs a non-empty string 'prompt' or a 'messages' list", PROMPTS_HINT
            )
    if not out:
        raise TuneproofError(f"{p} holds no prompts", PROMPTS_HINT)
    return out


def _is_messages(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in value
        )
    )


def tiny_tokenizer() -> Any:
    """A byte-level tokenizer (256 byte tokens after <pad>, <eos>, <bos>) with a plain chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2}
    for ch in sorted(byte_chars):
        vocab[ch] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", padding_side="left"
    )
    fast.chat_template = TINY_CHAT_TEMPLATE
    return fast


def _fingerprint_state(model: Any) -> str:
    """sha256 over every tensor of the loaded model: name, dtype, shape and bytes, in name order."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}\0".encode())
        digest.update(t.view(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _fingerprint_files(folder: Path, pattern: str) -> str | None:
    """sha256 over the bytes of the folder's weight files, streamed, in name order; None without any."""
    files = sorted(folder.glob(pattern))
    if not files:
        return None
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def load_model(model: str, adapter: str | None) -> tuple[Any, Any, dict[str, str | None]]:
    """(model, tokenizer, fingerprint) on the best device: CUDA when present, else CPU."""
    import torch

    check_paths(GenerateSpec(model=model, prompts="", adapter=adapter))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if model == "tiny":
        from tuneproof.arch import resolve
        from tuneproof.measure.model import build_model

        lm = build_model(resolve("tiny"), "sdpa", device=device)
        tokenizer = tiny_tokenizer()
        fp: dict[str, str | None] = {
            "weights_sha256": _fingerprint_state(lm),
            "over": "state dict of the tiny model (seed 0)",
        }
    else:
        folder = Path(model)
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, padding_side="left")
            loaded: Any = AutoModelForCausalLM.from_pretrained(
                str(folder), local_files_only=True, dtype="auto"
            )
            lm = loaded.to(device)
        except (OSError, ValueError) as e:
            raise TuneproofError(
                f"cannot load {folder}: {(str(e).splitlines() or [''])[0]}",
                "pass a local transformers model folder",
            ) from None
        fp = {
            "weights_sha256": _fingerprint_files(folder, "*.safetensors"),
            "over": "the *.safetensors files",
        }
    if adapter is not None:
        folder = Path(adapter)
        lm = _with_adapter(lm, folder).to(device)
        fp["adapter_sha256"] = _fingerprint_files(folder, "adapter_model.*")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    lm.eval()
    return lm, tokenizer, fp


def _encode(tokenizer: Any, prompt: Prompt) -> str:
    if prompt.messages is None:
        assert prompt.prompt is not None
        return prompt.prompt
    if not getattr(tokenizer, "chat_template", None):
        raise TuneproofError(
            f"prompt {prompt.prompt_id!r} has 'messages' but the tokenizer has no chat template",
            "give a plain 'prompt', or a model whose tokenizer has a chat template",
        )
    return str(tokenizer.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=False))


def generate(
    spec: GenerateSpec, prompts: list[Prompt], progress: Progress | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(rows, meta): one row per response, and the sidecar describing how they were made."""
    import torch

    lm, tokenizer, fingerprint = load_model(spec.model, spec.adapter)
    device = next(lm.parameters()).device
    texts = [_encode(tokenizer, p) for p in prompts]
    rows: list[dict[str, Any]] = []
    seeds = [spec.seed + r for r in range(spec.runs)]
    total, done = spec.runs * len(prompts), 0
    sampling = spec.temperature > 0
    kwargs: dict[str, Any] = {"max_new_tokens": spec.max_new_tokens, "do_sample": sampling}
    if sampling:
        kwargs.update(temperature=spec.temperature, top_p=spec.top_p, top_k=0)
    for run, seed in enumerate(seeds):
        torch.manual_seed(seed)
        for lo in range(0, len(prompts), spec.batch_size):
            batch = prompts[lo : lo + spec.batch_size]
            enc = tokenizer(
                texts[lo : lo + spec.batch_size], return_tensors="pt", padding=True, add_special_tokens=False
            ).to(device)
            with torch.no_grad():
                out = lm.generate(
                    **enc,
                    num_return_sequences=spec.samples,
                    pad_token_id=tokenizer.pad_token_id,
                    **kwargs,
                )
            new = out[:, enc["input_ids"].shape[1] :]
            decoded = tokenizer.batch_decode(new, skip_special_tokens=True)
            for i, prompt in enumerate(batch):
                for s in range(spec.samples):
                    rows.append(
                        {
                            "prompt_id": prompt.prompt_id,
                            "run": run,
                            "sample": s,
                            "text": decoded[i * spec.samples + s],
                            "seed": seed,
                        }
                    )
            done += len(batch)
            if progress:
                progress.count("generating", done, total)
    meta = {
        "model": spec.model,
        "adapter": spec.adapter,
        "fingerprint": fingerprint,
        "generation": {
            **{k: v for k, v in asdict(spec).items() if k != "out"},
            "seeds": seeds,
            "do_sample": sampling,
            "top_k": 0 if sampling else None,  # off: temperature and top-p alone shape the draws
            "device": str(device),
            # what the model's own generation config adds (repetition penalty, stop tokens, ...)
            "model_generation_config": _generation_config(lm),
        },
        "num_prompts": len(prompts),
        "versions": _versions(),
    }
    return rows, meta


def _generation_config(lm: Any) -> dict[str, Any]:
    config = getattr(lm, "generation_config", None)
    try:
        return dict(config.to_diff_dict()) if config is not None else {}
    except (AttributeError, TypeError, ValueError):
        return {}


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("tuneproof", "torch", "transformers", "peft", "tokenizers"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def meta_path(arm: Path) -> Path:
    """ARM.jsonl -> ARM.meta.json (next to it)."""
    name = arm.name.removesuffix(".gz").removesuffix(".jsonl")
    return arm.with_name(name + ".meta.json")


def _with_adapter(lm: Any, folder: Path) -> Any:
    """PEFT's PeftModel.from_pretrained, with an adapter made for another base (its factors' shapes
    do not fit) refused in one line instead of PEFT's warnings and torch's size-mismatch traceback."""
    import re
    import warnings

    from peft import PeftModel

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return PeftModel.from_pretrained(lm, str(folder))
    except (RuntimeError, ValueError, KeyError) as e:
        first = re.search(r"size mismatch for [^:]+: [^\n]*", str(e))
        why = first.group(0) if first else str(e).splitlines()[0][:200]
        raise TuneproofError(
            f"the adapter {folder} does not fit this model ({why})",
            "pass the base the adapter was trained on",
        ) from None
