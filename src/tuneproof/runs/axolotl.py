"""A run's own config, read as the trainer reads it: an Axolotl YAML (the schema of Axolotl 0.19, in
`axolotl_keys.json`) or a tuneproof recipe TOML, into one `tuneproof.runs.run.Run`.

Axolotl 0.19's rules, read from its source (axolotl/utils/schemas/config.py, enums.py, validation.py,
loaders/patch_manager.py, utils/trainer.py):

- Attention: `attn_implementation` (eager, sdpa, flash_attention_2/3/4, flash_attention_torch,
  flex_attention, xformers, sage, fp8, or a hub kernel path with "/"); the legacy flags map to it
  (xformers_attention, sage_attention, flex_attention, flash_attention, sdp_attention, eager_attention,
  in that priority) and are refused beside it; the short forms flash, flex and sdp are refused.
  `gemma4_hybrid_attn_impl` sets flash_attention_2 and gives every layer whose layer_types entry is not
  sliding_attention the SDPA path `sdpa_global_packed`.
- Packing: backends that take packed rows (flash, flex, xformers, sage and the kernels-community flash
  kernels) get one row of micro_batch_size x sequence_len tokens; the others micro_batch_size rows.
- Unknown keys are dropped silently by Axolotl's pydantic models (no `extra=`): here each is a finding,
  with Axolotl's nearest name.
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.runs.run import DatasetRef, LabelOptions, Run, TokenEdits

AXOLOTL_VERSION = "0.19.0"
HINT = "docs/preflight.md lists the Axolotl options read"
ATTN_VALUES = (
    "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4", "flash_attention_torch",
    "flex_attention", "xformers", "sage", "fp8",
)  # fmt: skip
LEGACY_ATTN = (
    ("xformers_attention", "xformers"), ("sage_attention", "sage"), ("flex_attention", "flex_attention"),
    ("flash_attention", "flash_attention_2"), ("sdp_attention", "sdpa"), ("eager_attention", "eager"),
)  # fmt: skip
# Axolotl pads every batch (and with pad_to_sequence_len every row) to a multiple of this many tokens unless
# the config sets pad_to_multiple_of (its trainer builder's collator arguments, 0.19)
AXOLOTL_PAD_MULTIPLE = 64
SHORT_ATTN = {"flash": "flash_attention_2", "flex": "flex_attention", "sdp": "sdpa"}
INT_FIELDS = ("sequence_len", "micro_batch_size", "gradient_accumulation_steps", "lora_r", "lora_alpha")
BOOL_FIELDS = {  # the options read here that take true/false, and the strings Axolotl 0.19 also takes
    "sample_packing": (), "pad_to_sequence_len": (), "gradient_checkpointing": ("offload", "offload_disk"),
    "activation_offloading": ("legacy", "disk", "hidden_states"), "load_in_4bit": (), "load_in_8bit": (),
    "lora_target_linear": (), "gemma4_hybrid_attn_impl": (), "torch_compile": ("auto",), "bf16": ("auto",),
    "fp16": (), "flash_attention": (), "sdp_attention": (), "flex_attention": (), "eager_attention": (),
    "xformers_attention": (), "sage_attention": (), "train_on_inputs": (),
}  # fmt: skip
ADAPTERS = ("lora", "qlora")
MAX_UNKNOWN_SHOWN = 20


@functools.cache
def axolotl_schema() -> dict[str, Any]:
    text = resources.files("tuneproof.preflight").joinpath("axolotl_keys.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass(frozen=True, slots=True)
class DuplicateKey:
    """A key one YAML mapping gives more than once, with each (line, value) in file order. Axolotl's
    `load_cfg` reads the file with PyYAML's `safe_load`, whose mappings keep the last value silently."""

    key: str  # the path from the top: "sequence_len", "special_tokens.pad_token", "datasets[0].type"
    occurrences: tuple[tuple[int, Any], ...]

    def finding(self, source: str) -> str:
        line, used = self.occurrences[-1]
        given = ", ".join(f"line {n}: {_shown(v)}" for n, v in self.occurrences)
        times = "twice" if len(self.occurrences) == 2 else f"{len(self.occurrences)} times"
        return (
            f"{source}, line {line}: {self.key} is given {times} ({given}): Axolotl's loader (PyYAML "
            f"safe_load) keeps the last, {_shown(used)}; keep the one you mean"
        )


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def read_yaml(path: Path) -> tuple[dict[str, Any], dict[str, int], tuple[DuplicateKey, ...]]:
    """The YAML's top-level mapping as Axolotl loads it (a key given twice keeps its last value), the
    line of each key (its last) and the keys given more than once; a YAML error names its line and
    column. Only Axolotl configs come here: a tuneproof recipe is TOML, whose reader refuses a key given
    twice (TOML forbids it, and `tuneproof train` reads it the same way), and quant-audit's YAML recipes
    are read with `safe_load` as llm-compressor reads them (recipe/utils.py `_load_json_or_yaml_string`).
    The Axolotl plugin gets the config already loaded: its duplicates are gone before tuneproof sees it."""
    import yaml

    from tuneproof.core.io import input_file

    input_file(path, "run config", HINT)
    try:
        text = path.read_text(encoding="utf-8-sig")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except UnicodeDecodeError as e:
        raise TuneproofError(f"{path}: invalid UTF-8 at byte {e.start}", "save it as UTF-8") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise TuneproofError(f"{path}{where}: not valid YAML ({e.problem or e.context})", HINT) from None
    except yaml.YAMLError as e:
        raise TuneproofError(f"{path}: not valid YAML ({e})", HINT) from None
    if not isinstance(data, dict):
        raise TuneproofError(f"{path} is not a YAML mapping of Axolotl options", HINT)
    lines: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, _ in node.value:
            lines[str(k.value)] = k.start_mark.line + 1  # the last occurrence: the one Axolotl keeps
    duplicates: list[DuplicateKey] = []
    _duplicates(node, "", yaml.SafeLoader(""), duplicates, set())
    duplicates.sort(key=lambda d: d.occurrences[-1][0])
    return {str(k): v for k, v in data.items()}, lines, tuple(duplicates)


def _duplicates(node: Any, where: str, loader: Any, out: list[DuplicateKey], seen: set[int]) -> None:
    """Every mapping in the document, nested ones too, walked once (an alias points at a node already
    seen); merge keys (<<) are PyYAML's to resolve and are not counted."""
    import yaml

    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _duplicates(item, f"{where}[{i}]", loader, out, seen)
    if not isinstance(node, yaml.MappingNode):
        return
    keys: dict[tuple[str, str], list[tuple[int, Any]]] = {}
    for k, v in node.value:
        if k.tag == "tag:yaml.org,2002:merge":
            continue
        name = str(k.value)
        keys.setdefault((k.tag, name), []).append((k.start_mark.line + 1, v))
        _duplicates(v, f"{where}.{name}" if where else name, loader, out, seen)
    for (_, name), found in keys.items():
        if len(found) > 1:
            values = tuple((line, loader.construct_object(v, deep=True)) for line, v in found)
            out.append(DuplicateKey(f"{where}.{name}" if where else name, values))


def from_axolotl(
    data: dict[str, Any],
    source: str,
    lines: dict[str, int] | None = None,
    duplicates: tuple[DuplicateKey, ...] = (),
) -> Run:
    """An Axolotl config (the YAML's mapping) as a Run; refuses what Axolotl 0.19 refuses and
    what cannot be checked (no base_model, a quoted number, conflicting attention options); each key
    the file gives more than once (`read_yaml`) is a finding naming the value Axolotl keeps."""
    lines = lines or {}

    def at(key: str) -> str:
        return f"{source}, line {lines[key]}" if key in lines else source

    schema = axolotl_schema()
    base = data.get("base_model_config") or data.get("base_model")  # Axolotl reads the config from the first
    if not isinstance(base, str) or not base.strip():
        raise TuneproofError(f"{source}: no base_model", "name the model: a local folder or a hub id")
    revision = data.get("revision_of_model") or data.get("model_revision")
    if isinstance(revision, str) and revision.strip() and "@" not in base:
        base = f"{base.strip()}@{revision.strip()}"
    _check_bools(data, at)
    for key in INT_FIELDS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            shown = f"the string {value!r}" if isinstance(value, str) else repr(value)
            raise TuneproofError(
                f"{at(key)}: {key} is {shown}, not a whole number",
                f"write it unquoted, e.g. {key}: 4096 (YAML reads 500_000 unquoted as 500000)",
            )
        if value is not None and value < 1:
            raise TuneproofError(f"{at(key)}: {key} = {value} must be at least 1", HINT)
    findings: list[str] = [d.finding(source) for d in duplicates]
    notes = [f"read as Axolotl {AXOLOTL_VERSION}'s schema ({len(schema['keys'])} options)"]
    kw: dict[str, Any] = {"seq_len": data.get("sequence_len") or 512}
    _unknown_keys(data, findings, at, schema)
    kw["micro_batch"] = data.get("micro_batch_size") or 1
    kw["grad_accum"] = data.get("gradient_accumulation_steps") or 1
    epochs = data.get("num_epochs")
    if epochs is not None and (
        isinstance(epochs, bool) or not isinstance(epochs, int | float) or not epochs > 0
    ):
        raise TuneproofError(f"{at('num_epochs')}: num_epochs = {epochs!r} must be a number above 0", HINT)
    kw["epochs"] = float(epochs) if epochs is not None else 1.0
    kw["packing"] = data.get("sample_packing") is True
    pad = data.get("pad_to_sequence_len")
    kw["pad_to_seq_len"] = pad if isinstance(pad, bool) else None
    _attention(data, kw, notes, at)
    _training(data, kw, findings, source)
    _adapter(data, kw, findings, at)
    kw["datasets"] = tuple(_datasets(data.get("datasets"), at("datasets")))
    kw["tokens"] = _tokens(data, at)
    kw["labels"] = _label_options(data, at)
    return Run(
        source=source,
        kind="axolotl",
        base_model=base.strip(),
        findings=tuple(findings),
        notes=tuple(notes),
        **kw,
    )


def _check_bools(data: dict[str, Any], at: Any) -> None:
    for key, words in BOOL_FIELDS.items():
        value = data.get(key)
        if value is None or isinstance(value, bool) or value in words:
            continue
        shown = f"the string {value!r}" if isinstance(value, str) else repr(value)
        takes = "true or false" + "".join(f" or {w}" for w in words)
        raise TuneproofError(f"{at(key)}: {key} is {shown}", f"write {takes}, unquoted")


def _unknown_keys(data: dict[str, Any], findings: list[str], at: Any, schema: dict[str, Any]) -> None:
    plugin_keys = schema["plugin_keys"]
    known = set(schema["keys"]) | set(schema["aliases"])
    listed = " ".join(str(p) for p in data.get("plugins") or [])
    unknown: list[str] = []
    for key in data:
        if key in known:
            continue
        owner = plugin_keys.get(key, {}).get("plugin")
        if owner is not None and owner in listed:
            continue
        if owner is not None:
            findings.append(
                f"{at(key)}: {key} belongs to Axolotl's {owner} plugin, which plugins does not list: "
                "Axolotl ignores it"
            )
            continue
        unknown.append(key)
        if len(unknown) > MAX_UNKNOWN_SHOWN:
            continue
        near = difflib.get_close_matches(key, [*known, *plugin_keys], n=1, cutoff=0.6)
        hint = f" (did you mean {near[0]}?)" if near else ""
        findings.append(f"{at(key)}: {key} is no Axolotl {AXOLOTL_VERSION} option: Axolotl drops it{hint}")
    if len(unknown) > MAX_UNKNOWN_SHOWN:
        findings.append(
            f"... and {len(unknown) - MAX_UNKNOWN_SHOWN} more options Axolotl {AXOLOTL_VERSION} does not know"
        )


def _attention(data: dict[str, Any], kw: dict[str, Any], notes: list[str], at: Any) -> None:
    legacy = [(k, v) for k, v in LEGACY_ATTN if data.get(k) is True]
    given = data.get("attn_implementation")
    if given is not None and not isinstance(given, str):
        raise TuneproofError(f"{at('attn_implementation')}: attn_implementation must be a string", HINT)
    if given and legacy:
        raise TuneproofError(
            f"{at('attn_implementation')}: attn_implementation {given!r} and "
            f"{', '.join(k for k, _ in legacy)}: true are both set (Axolotl 0.19 refuses the two together)",
            "keep attn_implementation and delete the legacy flag",
        )
    if len(legacy) > 1:
        raise TuneproofError(
            f"{at(legacy[1][0])}: conflicting attention options "
            + " and ".join(k + ": true" for k, _ in legacy),
            f"keep one: attn_implementation: {legacy[0][1]} (Axolotl would silently take {legacy[0][0]})",
        )
    attn = given or (legacy[0][1] if legacy else None)
    if legacy:
        notes.append(f"{legacy[0][0]}: true is read as attn_implementation: {attn} (deprecated in Axolotl)")
    if attn in SHORT_ATTN:
        raise TuneproofError(
            f"{at('attn_implementation')}: attn_implementation {attn!r} is a short form Axolotl refuses",
            f"write attn_implementation: {SHORT_ATTN[attn]}",
        )
    if attn is not None and attn not in ATTN_VALUES and "/" not in attn:
        raise TuneproofError(
            f"{at('attn_implementation')}: attn_implementation {attn!r} is not one Axolotl takes",
            "use one of " + ", ".join(ATTN_VALUES) + ", or a hub kernel path",
        )
    if data.get("gemma4_hybrid_attn_impl") is True:
        if attn not in (None, "flash_attention_2"):
            raise TuneproofError(
                f"{at('gemma4_hybrid_attn_impl')}: gemma4_hybrid_attn_impl needs flash_attention_2, "
                f"not {attn}",
                "drop attn_implementation (the hybrid sets flash_attention_2) or the hybrid",
            )
        attn, kw["hybrid"] = "flash_attention_2", True
    kw["attn"] = attn


def _training(data: dict[str, Any], kw: dict[str, Any], findings: list[str], source: str) -> None:
    ckpt = data.get("gradient_checkpointing")
    offload = data.get("activation_offloading")
    if ckpt in ("offload", "offload_disk"):  # Axolotl turns these into activation offloading
        offload, ckpt = ("disk" if ckpt == "offload_disk" else True), True
    kw["grad_ckpt"] = bool(ckpt)
    kw["offload"] = None if not offload else str(offload)
    kw["torch_compile"] = data.get("torch_compile") in (True, "auto")
    kw["load_in_4bit"] = data.get("load_in_4bit") is True
    kw["load_in_8bit"] = data.get("load_in_8bit") is True
    kw["optimizer"] = str(data["optimizer"]) if data.get("optimizer") else None
    kw["quantize_experts"] = data.get("quantize_moe_experts") is True
    if kw["load_in_4bit"] and kw["load_in_8bit"]:
        raise TuneproofError(f"{source}: load_in_4bit and load_in_8bit are both true", "keep one")
    kw["plugins"] = tuple(str(p) for p in data.get("plugins") or [])
    plugins = " ".join(kw["plugins"])
    if "cut_cross_entropy" in plugins and data.get("cut_cross_entropy") is not False:
        kw["fused_loss"] = "Cut Cross-Entropy (the plugin's default once listed)"
    elif "liger" in plugins and data.get("liger_fused_linear_cross_entropy"):
        kw["fused_loss"] = "Liger fused linear cross-entropy"
    fsdp = data.get("fsdp_config")
    kw["fsdp"] = fsdp if isinstance(fsdp, dict) else ({"fsdp": data["fsdp"]} if data.get("fsdp") else None)
    ds = data.get("deepspeed")
    kw["deepspeed"] = None if ds is None else (ds if isinstance(ds, str) else "inline config")
    # Axolotl's bf16 defaults to "auto" (bf16 where the card has it); bf16 false without fp16 is fp32
    bf16 = data.get("bf16", "auto")
    kw["dtype"] = (
        "fp16" if data.get("fp16") is True and bf16 is not True else "fp32" if bf16 is False else "bf16"
    )
    kw["bf16_auto"] = bf16 == "auto" and data.get("fp16") is not True
    if data.get("fp16") is True and data.get("bf16") is True:
        findings.append(f"{source}: bf16 and fp16 are both true: the run trains in one of them (bf16 here)")


def _adapter(data: dict[str, Any], kw: dict[str, Any], findings: list[str], at: Any) -> None:
    adapter = data.get("adapter")
    kw["adapter"] = str(adapter) if adapter else None
    if kw["adapter"] is not None and kw["adapter"] not in ADAPTERS:
        findings.append(
            f"{at('adapter')}: adapter {kw['adapter']!r} is not lora or qlora: Axolotl refuses it unless a "
            "plugin registers it; costed here as LoRA"
        )
    if kw["adapter"] == "qlora" and data.get("load_in_4bit") is not True:
        raise TuneproofError(
            f"{at('adapter')}: adapter qlora without load_in_4bit: true (Axolotl 0.19 refuses it)",
            "set load_in_4bit: true, or use adapter: lora",
        )
    r = data.get("lora_r")
    kw["lora_r"] = r if isinstance(r, int) else 8
    modules = data.get("lora_target_modules")
    if isinstance(modules, str):
        kw["target_regex"] = modules
    elif isinstance(modules, list):
        kw["targets"] = tuple(str(m) for m in modules)
    elif modules is not None:
        raise TuneproofError(
            f"{at('lora_target_modules')}: lora_target_modules must be a list or a string", HINT
        )
    kw["target_linear"] = data.get("lora_target_linear") is True
    params = data.get("lora_target_parameters")
    kw["target_parameters"] = (params,) if isinstance(params, str) else tuple(str(p) for p in params or [])
    if kw.get("target_regex") is not None:
        import re

        try:
            re.compile(kw["target_regex"])
        except re.error as e:
            raise TuneproofError(
                f"{at('lora_target_modules')}: the regex does not compile ({e})", HINT
            ) from None
        if kw["target_linear"]:  # Axolotl then lists the string with the linear names: no longer a regex
            kw["targets"], kw["target_regex"] = (kw["target_regex"],), None
            findings.append(
                f"{at('lora_target_linear')}: lora_target_linear with a lora_target_modules string makes "
                "Axolotl match the string as a module name, not as a regex"
            )


SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")  # Axolotl's SpecialTokensConfig


def _tokens(data: dict[str, Any], at: Any) -> TokenEdits:
    """special_tokens and tokens as Axolotl's pydantic models take them (strings, and a list of strings
    for additional_special_tokens and tokens); anything else is refused, as Axolotl refuses it."""
    special = data.get("special_tokens") or {}
    if not isinstance(special, dict):
        raise TuneproofError(f"{at('special_tokens')}: special_tokens must be a mapping", HINT)
    pairs: list[tuple[str, str]] = []
    for key, text in special.items():
        if key in SPECIAL_TOKEN_KEYS and text is not None:
            if not isinstance(text, str):
                raise TuneproofError(f"{at('special_tokens')}: special_tokens.{key} must be a string", HINT)
            pairs.append((key, text))
    extra = special.get("additional_special_tokens") or []
    added = data.get("tokens") or []
    for key, value in (("special_tokens.additional_special_tokens", extra), ("tokens", added)):
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise TuneproofError(f"{at(key.split('.')[0])}: {key} must be a list of strings", HINT)
    save = data.get("lora_modules_to_save") or []
    mean = data.get("mean_resizing_embeddings")
    return TokenEdits(
        special=(*pairs, *(("additional_special_tokens", t) for t in extra)),
        added=tuple(added),
        tokenizer=str(data["tokenizer_config"]) if data.get("tokenizer_config") else None,
        modules_to_save=tuple(str(m) for m in save) if isinstance(save, list) else (),
        mean_resizing=mean if isinstance(mean, bool) else None,
        resize_to_32x=data.get("resize_token_embeddings_to_32x") is True,
    )


def looks_local(path: str) -> bool:
    """A path written as a file (absolute, relative with ./ or ../, ~, or a data file's suffix)."""
    suffixes = (".json", ".jsonl", ".parquet", ".csv", ".txt", ".arrow")
    return path.startswith(("/", "./", "../", "~")) or path.lower().endswith(suffixes)


def _datasets(value: Any, where: str) -> list[DatasetRef]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TuneproofError(f"{where}: datasets must be a list", HINT)
    out = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise TuneproofError(f"{where}: every datasets entry needs a path", HINT)
        p = Path(item["path"]).expanduser()
        kind = item.get("type")
        field_name = item.get("field_messages") or item.get("field")
        local = p if p.exists() else None
        roles = item.get("roles_to_train")
        if roles is not None and not (isinstance(roles, list) and all(isinstance(r, str) for r in roles)):
            raise TuneproofError(f"{where}: roles_to_train must be a list of role names", HINT)
        eos = {k: item.get(k) for k in ("train_on_eos", "train_on_eot")}
        for key, value in eos.items():
            if value is not None and value not in EOS_OPTIONS:
                raise TuneproofError(
                    f"{where}: {key} is {value!r}",
                    f"write one of {', '.join(EOS_OPTIONS)} (Axolotl's values)",
                )
        out.append(
            DatasetRef(
                path=item["path"],
                kind=str(kind) if kind else "text",
                local=local,
                field=field_name,
                meant_local=looks_local(item["path"]),
                roles_to_train=tuple(roles) if roles is not None else None,
                train_on_eos=eos["train_on_eos"],
                train_on_eot=eos["train_on_eot"],
                message_keys=_message_keys(item, where),
            )
        )
    return out


def _message_keys(item: dict[str, Any], where: str) -> tuple[str, str]:
    """The keys of a message's role and content: message_property_mappings (or the deprecated
    message_field_role / message_field_content), default role and content."""
    mapping = item.get("message_property_mappings") or {}
    if not isinstance(mapping, dict):
        raise TuneproofError(f"{where}: message_property_mappings must be a mapping", HINT)
    role = mapping.get("role") or item.get("message_field_role") or "role"
    content = mapping.get("content") or item.get("message_field_content") or "content"
    return str(role), str(content)


EOS_OPTIONS = ("turn", "all", "last", "none")  # Axolotl's train_on_eos and train_on_eot
EXCESS = ("drop", "truncate", "raise")  # Axolotl's excess_length_strategy


def _label_options(data: dict[str, Any], at: Any) -> LabelOptions:
    """train_on_inputs, eot_tokens, excess_length_strategy and chat_template as Axolotl 0.19 reads them."""
    eot = data.get("eot_tokens")
    if eot is not None and not (isinstance(eot, list) and all(isinstance(t, str) for t in eot)):
        raise TuneproofError(f"{at('eot_tokens')}: eot_tokens must be a list of strings", HINT)
    excess = data.get("excess_length_strategy") or "drop"
    if str(excess).lower() not in EXCESS:
        raise TuneproofError(
            f"{at('excess_length_strategy')}: excess_length_strategy is {excess!r}",
            "write drop, truncate or raise",
        )
    template = data.get("chat_template")
    return LabelOptions(
        train_on_inputs=data.get("train_on_inputs") is True,
        eot_tokens=tuple(eot) if eot is not None else None,
        excess_length=str(excess).lower(),
        chat_template=None if template in (None, "tokenizer_default") else str(template),
    )
