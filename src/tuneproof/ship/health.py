"""Adapter health: did every adapted module (and every expert) train, how large is its change, and
what of the base does the adapter cover.

"Trained" is judged on the factor that starts at zero: B for linear and expert LoRA, A for embedding
LoRA (PEFT `reset_lora_parameters`). An all-zero factor is a module that never received a gradient
step; for fused experts the test runs per expert, on B's columns j with j % E == e, so an expert the
router never chose shows up. Inits that start B non-zero (PiSSA, OLoRA, LoftQ, CorDA, orthogonal,
LoRA-GA, `init_lora_weights=false`) cannot be judged this way: they are compared to the initial
adapter when one is given, and reported unjudged otherwise.

Norms are Frobenius norms in fp32; the effective change is ||scaling * B @ A||, computed from the r x r
Gram matrices (never the full product), and divided by ||W_base|| when the base weights are given.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuneproof.core.errors import TuneproofError
from tuneproof.core.extras import require
from tuneproof.core.verdict import CANNOT_JUDGE, FINDING, Verdict
from tuneproof.ship.adapter import ZERO_B_INITS, Adapter, Module, read_adapter
from tuneproof.ship.identity import FINGERPRINT_NAME
from tuneproof.ship.layout import FAMILIES, checkpoint_pieces, meta_model, parameters
from tuneproof.ship.serving import Facts, notes
from tuneproof.ship.tensors import Checkpoint, read_tensor


@dataclass(kw_only=True, frozen=True, slots=True)
class ModuleHealth:
    path: str
    kind: str
    rank: int
    scaling: float
    a_norm: float
    b_norm: float
    delta_norm: float  # ||scaling * B @ A||_F
    trained: bool | None  # None: cannot be judged (non-zero init and no initial adapter)
    judged_on: str  # "B", "A" (embeddings), "initial" or "none"
    num_experts: int = 1
    idle_experts: tuple[int, ...] = ()
    base_norm: float | None = None  # ||W_base||_F, when the base weights were given
    target: str | None = None
    finite: bool = True  # False: A or B holds NaN or inf (the norms are then unknown)
    width: int | None = None  # min(in, out) of the adapted matrix: the most rank B @ A can have

    @property
    def rank_above_width(self) -> bool:
        return self.width is not None and self.rank > self.width

    @property
    def relative(self) -> float | None:
        return self.delta_norm / self.base_norm if self.base_norm else None

    @property
    def start_zero_norm(self) -> float:
        """Norm of the factor that starts at zero (B, or A for embeddings)."""
        return self.a_norm if self.kind == "embedding" else self.b_norm


@dataclass(kw_only=True, frozen=True, slots=True)
class FamilyCoverage:
    family: str
    matrices: int
    adapted: int
    share: float  # of all parameters


@dataclass(kw_only=True, slots=True)
class Health:
    modules: list[ModuleHealth]
    judged: bool
    why_unjudged: str | None
    init: Any
    coverage: list[FamilyCoverage] | None = None
    serving: list[tuple[str, str]] = field(default_factory=list)
    resolved_with_base: bool = False
    warnings: list[str] = field(default_factory=list)
    base_name: str | None = None  # adapter_config's base_model_name_or_path: a name, not a hash
    fingerprint_recorded: bool = False  # a readable base_fingerprint.json next to the adapter
    fingerprint_problem: str | None = None  # why the one there cannot be used (merge refuses it)
    adapter_dir: Path | None = None  # the folder checked, as given (None: an adapter in memory)
    base: Path | None = None  # the base it was checked against, as given
    labels: dict[str, str] = field(default_factory=dict)  # how the text names `base`: the command's flag

    def to_dict(self) -> dict[str, Any]:
        """Exactly what `tuneproof lora check --json` prints."""
        from tuneproof.ship.render import health_json

        return health_json(self)

    def render(self, console: Any) -> None:
        from tuneproof.ship.render import health_lines, print_lines

        print_lines(console, health_lines(self))

    @property
    def untrained(self) -> list[ModuleHealth]:
        return [m for m in self.modules if m.trained is False]

    @property
    def not_finite(self) -> list[ModuleHealth]:
        return [m for m in self.modules if not m.finite]

    @property
    def rank_above_width(self) -> list[ModuleHealth]:
        return [m for m in self.modules if m.rank_above_width]

    @property
    def idle_expert_count(self) -> int:
        return sum(len(m.idle_experts) for m in self.modules)

    @property
    def healthy(self) -> bool | None:
        if not self.judged:
            return None
        return (
            not self.untrained and not self.idle_expert_count and not self.not_finite
            and not self.rank_above_width
        )  # fmt: skip

    @property
    def verdict(self) -> Verdict:
        """HEALTHY (exit 0), NOT HEALTHY (1: a module or an expert never trained, NaN, or a rank above
        the matrix's smaller side, where B @ A cannot use it), CANNOT JUDGE (3: the init starts lora_B
        non-zero and no step-0 adapter was given). A rank above the width is structural: it is said
        even where the training cannot be judged."""
        if not self.judged and not self.rank_above_width:
            return Verdict(
                outcome="CANNOT JUDGE",
                reason="the init starts lora_B non-zero: judge it against the adapter saved at step 0 "
                "(the initial adapter)",
                exit_code=CANNOT_JUDGE,
            )
        what = (
            [] if self.judged else ["whether it trained cannot be judged (the init starts lora_B non-zero)"]
        )
        if self.not_finite:
            what.append(f"{len(self.not_finite)} adapted modules hold NaN or inf")
        if self.untrained:
            what.append(f"{len(self.untrained)} adapted modules never trained")
        if self.idle_expert_count:
            what.append(f"{self.idle_expert_count} experts never moved")
        if over := self.rank_above_width:
            m = over[0]
            what.append(
                f"{len(over)} adapted modules have a rank above their matrix's smaller side (e.g. "
                f"{m.path}: rank {m.rank} on a {m.width}-wide side, so B @ A has rank {m.width} at most: "
                f"the extra rank is memory and compute that cannot train, and alpha/r scales the update "
                f"as if it could)"
            )
        if what:
            return Verdict(outcome="NOT HEALTHY", reason=", ".join(what), exit_code=FINDING)
        return Verdict(
            outcome="HEALTHY", reason="every adapted module (and every expert) moved from its start"
        )

    def summary(self) -> str:
        """The reference run's line: `lora_B non-zero in 205 of 205 adapted modules, median norm 1.708`."""
        norms = [m.start_zero_norm for m in self.modules if m.finite]
        median = statistics.median(norms) if norms else math.nan
        bad = len(self.not_finite)
        tail = f"; {bad} modules hold NaN or inf" if bad else ""
        if not self.judged:
            return (
                f"cannot judge from lora_B: init_lora_weights={self.init!r} starts it non-zero "
                f"({len(self.modules)} adapted modules, median lora_B norm {median:.4g}){tail}"
            )
        if self.modules and all(m.judged_on == "initial" for m in self.modules):
            moved = sum(1 for m in self.modules if m.trained)
            return f"moved from the initial adapter in {moved} of {len(self.modules)} adapted modules{tail}"
        nonzero = sum(1 for m in self.modules if m.start_zero_norm > 0)
        factor = (
            "lora_B" if all(m.kind != "embedding" for m in self.modules) else "lora_B (lora_A for embeddings)"
        )
        return (
            f"{factor} non-zero in {nonzero} of {len(self.modules)} adapted modules, median norm {median:.4g}"
            + tail
        )


def _frob_product(a: Any, b: Any) -> float:
    """||B @ A||_F from the r x r Gram matrices: trace(B^T B A A^T)."""
    value = float(((b.T @ b) * (a @ a.T)).sum())
    return math.sqrt(max(value, 0.0))


def module_health(
    module: Module, a: Any, b: Any, initial: tuple[Any, Any] | None, judge_zero: bool
) -> ModuleHealth:
    import torch

    a, b = a.float(), b.float()
    finite = bool(torch.isfinite(a).all() and torch.isfinite(b).all())
    zero_factor = a if module.kind == "embedding" else b
    idle: tuple[int, ...] = ()
    if module.kind == "experts":
        e = module.num_experts
        a_eri = a.reshape(e, -1, a.shape[-1])
        b_ore = b.reshape(b.shape[0], -1, e)
        per = [_frob_product(a_eri[i], b_ore[:, :, i]) for i in range(e)]
        delta_norm = module.scaling * math.sqrt(sum(x * x for x in per))
        if initial is not None:
            a0 = initial[0].float().reshape(e, -1, a.shape[-1])
            b0 = initial[1].float().reshape(b.shape[0], -1, e)
            moved = [
                bool((a_eri[i] != a0[i]).any() or (b_ore[:, :, i] != b0[:, :, i]).any()) for i in range(e)
            ]
        else:
            moved = [bool(b_ore[:, :, i].any()) for i in range(e)]
        idle = tuple(i for i, m in enumerate(moved) if not m)
    else:
        delta_norm = module.scaling * _frob_product(a, b)
    if initial is not None:
        trained: bool | None = bool((a != initial[0].float()).any() or (b != initial[1].float()).any())
        judged_on = "initial"
    elif judge_zero:
        trained = bool(zero_factor.any())
        judged_on = "A" if module.kind == "embedding" else "B"
    else:
        trained, judged_on = None, "none"
    if trained is False:
        idle = tuple(range(module.num_experts)) if module.kind == "experts" else ()
    return ModuleHealth(
        path=module.path, kind=module.kind, rank=module.rank, scaling=module.scaling, a_norm=float(a.norm()),
        b_norm=float(b.norm()), delta_norm=delta_norm, trained=trained, judged_on=judged_on,
        num_experts=module.num_experts, idle_experts=idle, target=module.target, finite=finite,
        width=min(int(a.shape[-1]), int(b.shape[0])),
    )  # fmt: skip


def _require_peft() -> None:
    require("train", "checking an adapter against a base (PEFT wraps it on the meta device)", ("peft",))


def check_adapter(
    adapter_dir: Path,
    base: Path | None = None,
    initial: Path | None = None,
    progress: Callable[[int], None] | None = None,
) -> Health:
    """Health of the adapter in `adapter_dir`; `base` (a model folder or config.json) adds coverage,
    exact structure and, when it holds weights, ||delta W|| / ||W||; `initial` judges non-zero inits."""
    from tuneproof.ship.layout import read_config
    from tuneproof.ship.tensors import open_checkpoint

    if base is not None:
        _require_peft()
    base_config = read_config(base) if base is not None else None
    base_weights: Checkpoint | None = None
    if base is not None and Path(base).is_dir() and any(Path(base).glob("*.safetensors")):
        base_weights = open_checkpoint(Path(base), "base")
    adapter = read_adapter(adapter_dir, base_config)
    initial_adapter = _read_initial(initial, adapter, base_config) if initial is not None else None
    judge_zero = adapter.zero_b_init
    modules = []
    with adapter.header.path.open("rb") as f:
        init_f = initial_adapter.header.path.open("rb") if initial_adapter else None
        try:
            init_by_path = {m.path: m for m in initial_adapter.modules} if initial_adapter else {}
            for module in adapter.modules:
                a, b = read_tensor(module.a, f), read_tensor(module.b, f)
                start = None
                if init_f is not None:
                    m0 = init_by_path[module.path]
                    start = (read_tensor(m0.a, init_f), read_tensor(m0.b, init_f))
                modules.append(module_health(module, a, b, start, judge_zero))
                if progress:
                    progress(1)
        finally:
            if init_f:
                init_f.close()
    judged = judge_zero or initial_adapter is not None
    health = Health(
        modules=modules,
        judged=judged,
        why_unjudged=None if judged else f"init_lora_weights={adapter.init!r} starts B non-zero",
        init=adapter.init,
        resolved_with_base=adapter.resolved_with_base,
        base_name=adapter.config.get("base_model_name_or_path"),
        adapter_dir=Path(adapter_dir),
        base=Path(base) if base is not None else None,
    )
    health.fingerprint_recorded, health.fingerprint_problem = _recorded_fingerprint(Path(adapter_dir))
    if adapter.dora:
        health.warnings.append(
            "DoRA: the magnitude vector also trains; a zero B still means no direction change"
        )
    model = meta_model(base_config) if base_config is not None else None
    if model is not None:
        health.coverage = coverage(model, adapter)
        if base_weights is not None:
            health.modules = _with_base_norms(health.modules, model, base_weights)
    health.serving = notes(_facts(adapter, base_config, model))
    return health


def _read_initial(initial: Path, adapter: Adapter, base_config: dict[str, Any] | None) -> Adapter:
    start = read_adapter(initial, base_config)
    mine = {m.path: (m.a.shape, m.b.shape) for m in adapter.modules}
    theirs = {m.path: (m.a.shape, m.b.shape) for m in start.modules}
    if mine != theirs:
        diff = sorted(set(mine.items()) ^ set(theirs.items()))
        raise TuneproofError(
            f"the initial adapter {initial} does not match the adapter: {len(diff)} modules differ "
            f"in name or shape ({diff[0][0]})",
            "pass the adapter saved before the first step of this run",
        )
    return start


def coverage(model: Any, adapter: Adapter) -> list[FamilyCoverage]:
    params = parameters(model)
    total = sum(p.numel for p in params) or 1
    targets = {m.target for m in adapter.modules}
    out = []
    for family in FAMILIES:
        mine = [p for p in params if p.family == family]
        if not mine or family == "other":
            continue
        out.append(
            FamilyCoverage(
                family=family,
                matrices=sum(p.matrices for p in mine),
                adapted=sum(p.matrices for p in mine if p.name in targets),
                share=sum(p.numel for p in mine) / total,
            )
        )
    return out


def _with_base_norms(modules: list[ModuleHealth], model: Any, base: Checkpoint) -> list[ModuleHealth]:
    import dataclasses

    stored = set(base.tensors)
    shard_of = base.shard_of()
    out = []
    for m in modules:
        if m.target is None:
            out.append(m)
            continue
        pieces = checkpoint_pieces(model, m.target, None, stored)
        missing = [k for k in pieces if k not in stored]
        if missing:
            raise TuneproofError(
                f"the base checkpoint does not hold {missing[0]}, which {m.path} changes",
                "pass the base the adapter was trained on",
            )
        total = 0.0
        for key in pieces:
            with shard_of[key].path.open("rb") as f:
                total += float(read_tensor(base.tensors[key], f).float().square().sum())
        out.append(dataclasses.replace(m, base_norm=math.sqrt(total)))
    return out


def _facts(adapter: Adapter, base_config: dict[str, Any] | None, model: Any) -> Facts:
    moe = any(m.kind == "experts" for m in adapter.modules)
    if model is not None:
        moe = moe or any(p.family == "experts" for p in parameters(model))
    model_type = None
    if base_config is not None:
        model_type = str(base_config.get("model_type"))
        text = base_config.get("text_config")
        if isinstance(text, dict) and text.get("model_type"):
            model_type = str(text["model_type"])
    return Facts(
        model_type=model_type,
        moe=moe,
        fused_expert_lora=any(m.kind == "experts" for m in adapter.modules),
        dora=adapter.dora,
        modules_to_save=bool(adapter.config.get("modules_to_save")),
        patterns=bool(adapter.config.get("rank_pattern") or adapter.config.get("alpha_pattern")),
        embedding_lora=any(m.kind == "embedding" for m in adapter.modules),
    )


def live_health(model: Any) -> Health:
    """Health of the adapter inside a PEFT model in memory (its active adapter), for the end of training:
    the same judgement as `check_adapter`, on the live tensors (an FSDP2 shard gathered whole first, so
    under FSDP2 every rank must call this, in the same order)."""
    from peft.tuners.lora import LoraLayer, ParamWrapper

    config = getattr(model, "peft_config", {})
    name = getattr(model, "active_adapter", None) or next(iter(config), "default")
    init = getattr(config.get(name), "init_lora_weights", True) if config else True
    modules = []
    for path, found in model.named_modules():
        if not isinstance(found, LoraLayer) or name not in found.scaling:
            continue
        layer: Any = found
        if name in layer.lora_A:
            a, b = _whole(layer.lora_A[name].weight), _whole(layer.lora_B[name].weight)
            experts = isinstance(layer, ParamWrapper) and layer.num_experts > 1
            kind = "experts" if experts else "linear"
        else:
            a, b = _whole(layer.lora_embedding_A[name]), _whole(layer.lora_embedding_B[name])
            kind = "embedding"
        module = Module(
            path=path, kind=kind, a=None, b=None,  # type: ignore[arg-type]
            rank=int(layer.r[name]), scaling=float(layer.scaling[name]), target=None,
            num_experts=int(layer.num_experts) if kind == "experts" else 1,
        )  # fmt: skip
        modules.append(module_health(module, a.cpu(), b.cpu(), None, init in ZERO_B_INITS))
    judged = init in ZERO_B_INITS
    return Health(
        modules=modules,
        judged=judged,
        why_unjudged=None if judged else f"init_lora_weights={init!r} starts B non-zero",
        init=init,
    )


def _whole(weight: Any) -> Any:
    """The whole tensor of a parameter, detached: an FSDP2 shard (a DTensor) all-gathered, a collective."""
    from torch.distributed.tensor import DTensor

    return (weight.full_tensor() if isinstance(weight, DTensor) else weight).detach()


def _recorded_fingerprint(adapter_dir: Path) -> tuple[bool, str | None]:
    """(a usable base_fingerprint.json is there, why the one there is not): a damaged record is said
    here, since `merge` refuses it."""
    from tuneproof.ship.identity import read_fingerprint

    path = adapter_dir / FINGERPRINT_NAME
    if not path.is_file():
        return False, None
    try:
        read_fingerprint(path)
    except TuneproofError as e:
        return False, e.what
    return True, None
