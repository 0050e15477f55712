"""The one PEFT target matcher: how a list of `target_modules` names (and every `target_parameters`
name) picks modules. PEFT 0.21 `check_target_module_exists` matches a name in a list when it is the
module's full path or a '.'-separated suffix of it (`q_proj` matches `model.layers.0.self_attn.q_proj`,
never `my_q_proj`); a string is a regex over the full path instead (`re.fullmatch`, its own rule)."""

from __future__ import annotations

from collections.abc import Iterable


def peft_matches(name: str, targets: Iterable[str]) -> bool:
    """Whether a list of PEFT targets picks the module or parameter at path `name`."""
    return any(name == t or name.endswith("." + t) for t in targets)
