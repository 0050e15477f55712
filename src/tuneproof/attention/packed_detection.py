"""Does a model's own forward let transformers detect packed rows? Read from the installed
transformers' modeling file, not from a list: transformers 5.x finds the documents of a padding-free row
from `position_ids` that restart (`masking_utils.find_packed_sequence_indices`), but only when the
model's forward hands `position_ids` to `create_causal_mask` / `create_sliding_window_causal_mask`;
flash attention reads them itself (`modeling_flash_attention_utils._is_packed_sequence`), but only when
the decoder layers are given `position_ids`. A forward that passes neither builds one causal mask over
the whole row, and the documents attend to each other on every path.

In transformers 5.24, 178 model forwards pass `position_ids` to their masks and 70 do not; among the
decoders people fine-tune, `GptOssModel` and `GraniteMoeHybridModel` do not (their packed rows leak on
eager, SDPA and flex: `tuneproof explain --packed --live` shows it; tests/attention/test_isolation.py).
The answer is None where the forward is not in the model's own file (nothing to read, nothing claimed).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

MASK_BUILDERS = ("create_causal_mask", "create_sliding_window_causal_mask", "create_chunked_causal_mask")


@dataclass(frozen=True, slots=True)
class PackedDetection:
    """What one model's forward gives transformers to find packed documents with."""

    where: str  # "transformers/models/gpt_oss/modeling_gpt_oss.py GptOssModel.forward"
    masks_get_positions: bool  # the mask builders get position_ids (eager, sdpa, flex find documents)
    layers_get_positions: bool  # the decoder layers get position_ids (flash finds documents from them)

    def blind(self, attn: str) -> str:
        """Why packed documents attend to each other on `attn` with this forward, or "" when the
        forward lets transformers find them (the batch's own form decides the rest, `runs.batch`)."""
        if attn == "flash_attention_2":
            if self.layers_get_positions:
                return ""
            return (
                f"{self.where} does not pass position_ids to its decoder layers: flash attention finds "
                "packed documents only from cu_seq_lens_q sent by the collator"
            )
        if self.masks_get_positions:
            return ""
        return (
            f"{self.where} builds its masks without position_ids, so transformers never detects packed "
            "rows: one causal mask spans the row"
        )

    def fix(self) -> str:
        """Where this model's packed rows stay apart."""
        if self.layers_get_positions:
            return "pack only on flash_attention_2 (it reads the packed position_ids), or turn packing off"
        return (
            "pack only on flash_attention_2 with a collator that sends cu_seq_lens_q (DataCollatorWith"
            "Flattening(return_flash_attn_kwargs=True), TRL's bfd packing), or turn packing off"
        )


@functools.cache
def packed_detection(model_type: str) -> PackedDetection | None:
    """Read the backbone's forward in the installed modeling file (the config class's name with
    "Model" for "Config", transformers' own naming: GptOssConfig -> GptOssModel); None when that
    forward is not there or builds no causal mask itself."""
    import importlib.util
    from pathlib import Path

    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES, model_type_to_module_name

    config = CONFIG_MAPPING_NAMES.get(model_type)
    name = config.removesuffix("Config") + "Model" if isinstance(config, str) else None
    module = model_type_to_module_name(model_type)
    spec = importlib.util.find_spec(f"transformers.models.{module}.modeling_{module}")
    if not isinstance(name, str) or spec is None or spec.origin is None:
        return None
    path = Path(spec.origin)
    forward = _forward(_class_source(path.read_text(encoding="utf-8"), name), name)
    if forward is None:
        return None
    builders = set(MASK_BUILDERS)
    for node in ast.walk(forward):  # mask_function = create_causal_mask if ... else create_sliding_...
        if isinstance(node, ast.Assign) and any(
            isinstance(n, ast.Name) and n.id in MASK_BUILDERS for n in ast.walk(node.value)
        ):
            builders |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    masks = [c for c in ast.walk(forward) if isinstance(c, ast.Call) and _callee(c) in builders]
    if not masks:
        return None
    given = {k.arg for c in masks for k in c.keywords}
    for node in ast.walk(forward):  # mask_kwargs = {"config": ..., "position_ids": position_ids, ...}
        if isinstance(node, ast.Dict):
            given |= {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    layers = any(
        k.arg == "position_ids"
        for c in ast.walk(forward)
        if isinstance(c, ast.Call) and _callee(c) not in builders and _callee(c) != "rotary_emb"
        for k in c.keywords
    )
    where = f"transformers/models/{module}/{path.name} {name}.forward"
    return PackedDetection(where, "position_ids" in given, layers)


def _class_source(text: str, cls: str) -> ast.Module:
    """The class `cls` of a module's text, parsed alone (from its `class` line to the next top-level
    statement): the whole file parses ten times slower, and this runs at a run's first packed step."""
    start = text.find(f"\nclass {cls}(")
    if start < 0:
        return ast.Module(body=[], type_ignores=[])
    lines = text[start + 1 :].split("\n")
    end = next(
        (i for i, line in enumerate(lines[1:], 1) if line and not line[0].isspace() and line[0] not in "#)"),
        len(lines),
    )
    return ast.parse("\n".join(lines[:end]))


def _forward(tree: ast.Module, cls: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return next(
                (f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None
            )
    return None


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
