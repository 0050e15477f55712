"""The steps of bench/gpu_check.py, one function each, run one per process by `gpu_check.py --step`.

Each step gets the work folder (the model, tokenizer and data the `build` step saved there) and a
budget in seconds, and reports through `emit(row)`: a dict with `outcome` ("ok", "DIFF", "fail",
"partial") and `numbers` (a short text). A step may emit several times (the last row wins), so a step
stopped at its time limit still leaves what it had measured.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

WIDTHS = (2048, 4096, 8192, 16384)
PROBE_WIDTHS = (2048, 4096, 8192)
WINDOW = 1024
FLEX_T = 2048  # shared memory a flex kernel needs does not depend on the width: compile at a small one
TRAIN_STEPS = 4
TRAIN_ROW_WORDS = 2000  # each training row about this many tokens
DEVICE = "cuda"  # the CPU rehearsal (tests/contract/test_bench_gpu_check.py) sets "cpu" and smaller numbers
TRAIN_ATTENTION = "flex_attention"  # the rehearsal trains with sdpa: flex has no backward on a CPU

Emit = Callable[[dict[str, Any]], None]


def model_config() -> dict[str, Any]:
    """Gemma-4-shaped (examples/gemma4-26b-a4b-like/config.json's text config) with 6 layers (5
    sliding, 1 global), a dense MLP instead of 128 experts (memory, and FlopCounterMode sees dense
    GEMMs but not grouped_mm), and a 32k vocabulary (16k-token logits stay small)."""
    src = Path(__file__).resolve().parent.parent / "examples" / "gemma4-26b-a4b-like" / "config.json"
    text = dict(json.loads(src.read_text())["text_config"])
    text.update(
        num_hidden_layers=6,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        enable_moe_block=False,
        vocab_size=32768,
        max_position_embeddings=32768,
        pad_token_id=0,
    )
    for key in ("num_experts", "top_k_experts", "moe_intermediate_size"):
        text.pop(key, None)
    return text


def _cuda_facts() -> tuple[tuple[int, int], int]:
    import torch

    return torch.cuda.get_device_capability(0), smem_optin()


def smem_optin() -> int:
    """The device's opt-in shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin), read as
    torch's inductor reads it (the attribute is missing from torch's type stubs and on ROCm)."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return int(getattr(props, "shared_memory_per_block_optin", props.shared_memory_per_block))


def _first_line(e: BaseException) -> str:
    """The exception's type and first line; where Triton's out-of-resource text is buried in a wrapper's
    message (inductor's, dynamo's), that text instead."""
    message = str(e)
    at = message.find("out of resource")
    if at >= 0:
        return f"{type(e).__name__}: ...{' '.join(message[at : at + 200].split())}"
    text = message.strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200] if text else ''}"


def step_build(work: Path, budget_s: float, emit: Emit) -> None:
    """Build the model on CUDA in bf16 with random weights; save it, a word-level tokenizer and a
    training set into `work` (what the other steps read)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tuneproof.arch import resolve
    from tuneproof.measure.model import build_model

    folder = work / "model"
    model = resolve(model_config())
    net = build_model(model, "sdpa", device=DEVICE, dtype="bf16", seed=0)
    net.save_pretrained(folder)
    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(500)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(
        folder
    )
    rows = [
        " ".join(f"w{(i * 7 + j) % 500}" for j in range(TRAIN_ROW_WORDS - 50 * (i % 4))) for i in range(32)
    ]
    (work / "train.jsonl").write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    params = sum(p.numel() for p in net.parameters())
    cap, smem = _cuda_facts()
    emit(
        {
            "outcome": "ok",
            "numbers": f"{params / 1e6:.0f} M params, {torch.cuda.memory_allocated() / 2**30:.1f} GiB, "
            f"sm_{cap[0]}{cap[1]}, {smem:,} B smem/block opt-in, head_dims "
            f"{sorted({s.attention.head_dim for s in model.shape.layers})}",
        }
    )


def _context(
    width: int, batch: int, cap: tuple[int, int] | None, *, dtype: str = "bf16", training: bool = False,
    dropout: float | None = None, padded: bool = False,
) -> Any:  # fmt: skip
    """The explainer's context for a width and batch on the card of `cap` (None: the CPU)."""
    from tuneproof.attention.dispatch import Context
    from tuneproof.hardware.card import CPU, of_capability
    from tuneproof.runs.run import Run

    run = Run.of_flags(attn="sdpa", mode="full" if training else "forward", seq_len=width, micro_batch=batch)
    card = of_capability(cap) if cap is not None else CPU
    return Context(step=run.step(padded=padded), card=card, dtype=dtype, dropout=dropout)


def step_dispatch(work: Path, budget_s: float, emit: Emit) -> None:
    """Live dispatch (transformers' mask rule, torch's SDPA choice on this card) against the rule
    table's prediction, per attention group (every layer), at every width, padded and unpadded."""
    from tuneproof.arch import resolve
    from tuneproof.attention.dispatch import explain

    shape = resolve(work / "model" / "config.json").shape
    cap, _ = _cuda_facts()
    diffs: list[str] = []
    checked = 0
    for width in WIDTHS:
        for padded in (False, True):
            ctx = _context(width, 2, cap, dtype="bf16", training=True, padded=padded)
            live, predicted = explain(shape, ctx, live=True), explain(shape, ctx, live=False)
            for got, want in zip(live.layers, predicted.layers, strict=True):
                checked += got.num_layers
                if got.source != "live":
                    diffs.append(f"{width}/{padded}/{got.layer_type}: not asked live")
                elif (got.mask_materialised, got.backend) != (want.mask_materialised, want.backend):
                    diffs.append(
                        f"{width} padded={padded} {got.layer_type} d={got.head_dim}: live "
                        f"{got.backend} mask={got.mask_materialised} ({got.refused}), predicted "
                        f"{want.backend} mask={want.mask_materialised}"
                    )
            print(
                f"  {width} padded={padded}: " + ", ".join(f"{x.layer_type} {x.backend}" for x in live.layers)
            )
    emit(
        {
            "outcome": "ok" if not diffs else "DIFF",
            "numbers": f"{checked} layer checks over {len(WIDTHS)} widths x padded/unpadded, "
            f"{len(diffs)} differ" + ("".join(f"\n    {d}" for d in diffs)),
        }
    )


SDPA_HEAD_DIMS = ((64, 64), (100, 100), (128, 128), (192, 128), (192, 192), (256, 256), (512, 512))


def step_sdpa_grid(work: Path, budget_s: float, emit: Emit) -> None:
    """torch's own SDPA choice on this card, with its own cuDNN (`torch._fused_sdp_choice`, the
    `can_use_*` debug reasons), against the chooser's prediction on the stack read off the card, over
    dtype x head_dim (non-multiples of 8 and 192/128 included) x mask x dropout x training x GQA; the
    versions the rules read are printed (torch.version.cuda, torch.backends.cudnn.version())."""
    import itertools

    import torch

    from tuneproof.arch.shape import AttentionSpec
    from tuneproof.attention.dispatch import cuda_stack, predict
    from tuneproof.attention.live import live_sdpa

    cap = None if DEVICE == "cpu" else _cuda_facts()[0]
    stack = cuda_stack(_context(128, 1, cap)) if cap is not None else None
    print(f"  stack: {stack.to_dict() if stack else 'cpu'}", flush=True)
    diffs: list[str] = []
    cases = 0
    started = time.perf_counter()
    for dtype, (d_qk, d_v), mask, dropout, training, kv in itertools.product(
        ("bf16", "fp16", "fp32"), SDPA_HEAD_DIMS, (False, True), (0.0, 0.1, 0.125), (False, True), (8, 2)
    ):
        if time.perf_counter() - started > 0.8 * budget_s:
            break
        spec = AttentionSpec(
            kind="full", window=None, num_heads=8, num_kv_heads=kv, head_dim=d_qk, v_head_dim=d_v
        )
        ctx = _context(256, 1, cap, dtype=dtype, training=training, dropout=dropout, padded=mask)
        want = predict(ctx, spec, stack).backend
        got, refused, _ = live_sdpa(ctx, spec, mask)
        cases += 1
        if got != want:
            diffs.append(f"{dtype} d={d_qk}/{d_v} mask={mask} p={dropout} train={training} kv={kv}: "
                         f"live {got} ({refused}), predicted {want}")  # fmt: skip
    torch.cuda.empty_cache() if DEVICE == "cuda" else None
    versions = (
        f"cuda {torch.version.cuda}, cudnn {torch.backends.cudnn.version()}" if DEVICE == "cuda" else "cpu"
    )
    emit(
        {
            "outcome": "ok" if not diffs else "DIFF",
            "numbers": f"{cases} cases ({versions}), {len(diffs)} differ"
            + "".join(f"\n    {d}" for d in diffs[:12]),
        }
    )


def chosen_options(head_dims: list[int]) -> tuple[dict[str, int], list[str]]:
    """The chooser's one kernel_options for every head_dim, fwd and bwd, for this card's limit."""
    from tuneproof.attention.kernel_measure import choose_measured
    from tuneproof.attention.kernel_options import choose_for_head_dims

    cap, smem = _cuda_facts()
    options: dict[str, int] = {}
    reasons = []
    for p in ("fwd", "bwd"):
        c = choose_for_head_dims(head_dims, "bf16", capability=cap, smem_limit_bytes=smem, pass_=p)
        reasons.append(f"{p} estimated: {c.options or 'defaults'}: {c.reason}")
        m = choose_measured(head_dims, "bf16", p, capability=cap)  # torch's defaults, then the estimate's
        options.update(m.options)
        reasons.append(f"{p} measured: {m.options or 'defaults'}: {m.reason}")
    return options, reasons


def _flex_case(head_dim: int, sliding: bool, opts: dict[str, int], backward: bool, retry: bool = True) -> str:
    """Compile and run flex forward (and backward) once at FLEX_T with `opts`; what happened, as text
    (an out-of-resource failure with its Required/limit numbers is a result, not an error). `retry`:
    inductor's one-stage retry of an out-of-resource template (triton.dynamic_disable_pipelining)."""
    import torch
    import torch._inductor.config as inductor
    from torch.nn.attention.flex_attention import flex_attention

    inductor.triton.dynamic_disable_pipelining = retry

    from tuneproof.attention.flex import causal_block_mask, sliding_block_mask
    from tuneproof.attention.kernel_options import parse_out_of_resource

    torch._dynamo.reset()
    q, k, v = (
        torch.randn(1, 16, FLEX_T, head_dim, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    mask = sliding_block_mask(FLEX_T, WINDOW, DEVICE) if sliding else causal_block_mask(FLEX_T, DEVICE)
    flex = torch.compile(flex_attention)
    done = "fwd"
    try:
        out = flex(q, k, v, block_mask=mask, kernel_options=cast(Any, opts))
        torch.cuda.synchronize()
        if backward:
            done = "bwd"
            out.float().sum().backward()
            torch.cuda.synchronize()
    except Exception as e:  # Triton/inductor raise several types: every failure is recorded
        parsed = parse_out_of_resource(str(e))
        if parsed is not None:
            return f"{done} out of resource: required {parsed[0]:,} B > limit {parsed[1]:,} B"
        return f"{done} failed: {_first_line(e)}"
    return "fwd+bwd ran" if backward else "fwd ran"


def step_flex_options(work: Path, budget_s: float, emit: Emit) -> None:
    """Every option the chooser picks compiles and runs fwd and bwd at head_dim 256 (sliding) and 512
    (global); torch's defaults are run too (forward defaults; backward defaults behind the chosen
    forward), their failures recorded with the numbers."""
    options, reasons = chosen_options([256, 512])
    for r in reasons:
        print("  " + r)
    fwd_only = {k: v for k, v in options.items() if k.startswith("fwd_")}
    cases = [
        ("chosen", options, True, True),
        ("torch default fwd", {}, False, True),
        # without inductor's one-stage retry: does torch's own default fit this card, and is Triton's
        # "Required" the estimate's (kernel_options.caveats says where it is unverified)?
        ("torch default fwd, no 1-stage retry", {}, False, False),
        ("torch default bwd", fwd_only, True, True),
    ]
    lines: list[str] = [f"options {options or 'torch defaults'}"]
    chosen_ok = True
    cap, smem = _cuda_facts()
    for label, opts, backward, retry in cases:
        for head_dim, sliding in ((256, True), (512, False)):
            t0 = time.perf_counter()
            what = _flex_case(head_dim, sliding, opts, backward, retry)
            if not retry:
                from tuneproof.attention.kernel_options import default_fwd, smem_fwd

                bm, bn, st, _ = default_fwd(head_dim, "bf16", cap)
                what += (
                    f"; estimate {bm}x{bn} x {st}: {smem_fwd(bm, bn, head_dim, 'bf16', st):,} B vs {smem:,} B"
                )
            chosen_ok &= label != "chosen" or what.endswith("ran")
            lines.append(f"{label} d={head_dim}: {what} ({time.perf_counter() - t0:.0f} s)")
            print("  " + lines[-1], flush=True)
            emit({"outcome": "partial", "numbers": "\n    ".join(lines)})
    emit({"outcome": "ok" if chosen_ok else "fail", "numbers": "\n    ".join(lines)})


def step_probe(work: Path, budget_s: float, emit: Emit) -> None:
    """`tuneproof probe`'s library call on the model, SDPA, training step, 3 widths: the fit's
    quadratic share against the kernel table's at the profiled width."""
    from tuneproof.arch import resolve
    from tuneproof.commands import probe as probe_command
    from tuneproof.commands.probe import ProbeSpec

    spec = ProbeSpec.of(
        attn="sdpa", widths=PROBE_WIDTHS, batch=1, mode="full", device=DEVICE, dtype="bf16",
        min_repeats=3, max_repeats=8, budget_s=max(budget_s - 25, 20), over_budget="floor", profiles=2,
    )  # fmt: skip
    result = probe_command.run(
        probe_command.prepare(replace(spec, model=resolve(work / "model" / "config.json")))
    )
    fit, cross = result.fit, result.cross
    shares = ", ".join(f"{int(w)}: {100 * s:.1f} %" for w, s in sorted(fit.quad_share.items()))
    emit(
        {
            "outcome": "ok" if cross.verdict.outcome == "agree" else cross.verdict.outcome,
            "numbers": f"A={fit.a:.3g} s/token B={fit.b:.3g} s/token^2; fit quadratic share {shares}; at "
            f"{cross.width}: fit {100 * cross.values['quad_share_fit']:.1f} % vs kernels "
            f"{100 * cross.values['quad_share_kernels']:.1f} % (gap {cross.verdict.gap:+.1f} points, "
            f"{cross.verdict.outcome}); skipped {result.skipped or 'none'}",
        }
    )


def _median_step(net: Any, width: int, repeats: int = 3) -> float:
    """Median seconds of forward + loss + backward at `width` (batch 1), after one warm-up call."""
    import torch

    from tuneproof.measure.timing import time_fn

    ids = torch.randint(2, 500, (1, width), device=DEVICE)

    def step() -> None:
        net.zero_grad(set_to_none=True)
        net(input_ids=ids, labels=ids).loss.backward()

    return time_fn(step, repeats=repeats, warmup=1).median_s


def step_flex_vs_sdpa(work: Path, budget_s: float, emit: Emit) -> None:
    """Model step time (fwd+bwd, median of 3) under SDPA, then under flex with the chosen options
    (`enable_flex`, the recompile guard sized for the widths), at every width."""
    from tuneproof.arch import resolve
    from tuneproof.attention.flex import enable_flex
    from tuneproof.measure.model import build_model

    cap, _ = _cuda_facts()
    model = resolve(work / "model" / "config.json")
    net = build_model(model, "sdpa", device=DEVICE, dtype="bf16", seed=0).train()
    lines: list[str] = []
    for width in WIDTHS:
        sdpa = _median_step(net, width)
        try:
            with enable_flex(net, WIDTHS, capability=cap, dtype="bf16", training=True):
                flex = _median_step(net, width)
            lines.append(
                f"{width}: sdpa {sdpa * 1e3:.1f} ms, flex {flex * 1e3:.1f} ms, sdpa/flex {sdpa / flex:.2f}x"
            )
        except Exception as e:  # a flex failure is the result at this width; the others still run
            lines.append(f"{width}: sdpa {sdpa * 1e3:.1f} ms, flex failed: {_first_line(e)}")
        print("  " + lines[-1], flush=True)
        emit({"outcome": "partial", "numbers": "\n    ".join(lines)})
    emit(
        {
            "outcome": "ok" if all("failed" not in x for x in lines) else "fail",
            "numbers": "\n    ".join(lines),
        }
    )


ATTENTION_OPS = ("flex_attention", "scaled_dot_product", "flash_attention", "efficient_attention")


class _CountAndCompare:
    """A TrainerCallback: FlopCounterMode around each optimizer step, its count split into attention
    ops and the rest; at train end, the TuneproofCallback's per-step performed FLOPs and seconds (found
    among live objects: `train` does not hand its callback out)."""

    def __init__(self) -> None:
        self.counts: list[tuple[int, int]] = []  # per step: (attention ops, everything else)
        self.ops: set[str] = set()  # the ops FlopCounterMode counted (is flex_attention among them?)
        self.steps: list[Any] = []
        self.peak: float | None = None
        self._mode: Any = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._mode.__exit__(None, None, None)
        by_op = {str(op): int(n) for op, n in self._mode.get_flop_counts().get("Global", {}).items()}
        attention = sum(n for op, n in by_op.items() if any(a in op for a in ATTENTION_OPS))
        self.counts.append((attention, int(self._mode.get_total_flops()) - attention))
        self.ops |= set(by_op)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import gc

        from tuneproof.integrations.hf import TuneproofCallback

        ours = [o for o in gc.get_objects() if isinstance(o, TuneproofCallback)]
        if ours:
            self.steps = list(ours[-1].history)
            run = ours[-1]._run
            self.peak = getattr(run, "peak_tflops", None) if run is not None else None


def _attention_share(priced: list[tuple[Any, list[Any]]]) -> list[float]:
    """Per step, the ledger's performed attention FLOPs (components attention.*), summed over the step's
    micro-batches as the callback priced them."""
    out = []
    for ledger, batches in priced:
        out.append(
            sum(ledger.report(read).performed.where(component_prefix="attention.") for read in batches)
        )
    return out


def _recipe(work: Path) -> Path:
    path = work / "recipe.toml"
    path.write_text(
        f'[model]\nname = "{work / "model"}"\n'
        f'[data]\npath = "{work / "train.jsonl"}"\ntext_field = "text"\nmax_length = 4096\n'
        f"[optim]\nmax_steps = {TRAIN_STEPS}\nmicro_batch = 1\ngrad_accum = 1\n"
        f'[run]\nattention = "{TRAIN_ATTENTION}"\noutput_dir = "{work / "run"}"\n'
        "logging_steps = 1\nsave_steps = 1000\nprobe_budget_s = 0\n"
    )
    return path


def step_train(work: Path, budget_s: float, emit: Emit) -> None:
    """`tuneproof train` (its library calls, `tuneproof.commands.train.prepare` and `run`) with flex for a
    few steps on the saved model; per step, the callback's performed FLOPs against FlopCounterMode's count
    of the same step: outside attention they must agree (0.5 %); attention is shown side by side, as torch's
    formula counts the full square for flex (7 matmuls, no block skipping) and the ledger the blocks
    flex computes. The MFU is each count over the callback's own step time."""
    from transformers import TrainerCallback

    from tuneproof.commands.train import TrainSpec, prepare, run
    from tuneproof.runs.recipe import read_recipe
    from tuneproof.train import callback as cb

    priced: list[tuple[Any, list[Any]]] = []  # (the ledger, the step's BatchReads)
    price = cb.price_step

    def recording(ledger: Any, step: int, batches: Any, seconds: float) -> Any:
        priced.append((ledger, list(batches)))
        return price(ledger, step, batches, seconds)

    counter = type("CountAndCompare", (_CountAndCompare, TrainerCallback), {})()
    cb.price_step = recording  # type: ignore[assignment]
    try:
        result = run(prepare(TrainSpec(recipe=read_recipe(_recipe(work)), quiet=True)), None, [counter])
    finally:
        cb.price_step = price
    attention = _attention_share(priced)
    lines = [
        f"{result.steps} steps, loss {result.loss:.3f}, attention {result.attention}, peak {counter.peak}",
        "FlopCounterMode counted: " + ", ".join(sorted(counter.ops)),
    ]
    ratios = []
    for s, (c_attn, c_rest), ours_attn in zip(counter.steps, counter.counts, attention, strict=False):
        rest = s.performed - ours_attn
        ratios.append(rest / c_rest if c_rest else float("nan"))
        seen = (
            f"attention {ours_attn:.4g} vs counted {c_attn:.4g} (ledger/counter {ours_attn / c_attn:.3f})"
            if c_attn
            else f"attention {ours_attn:.4g}, FlopCounterMode saw no attention op"
        )
        mfu = (
            f", MFU callback {s.performed / s.seconds / 1e12 / counter.peak:.3%} vs counter "
            f"{(c_attn + c_rest) / s.seconds / 1e12 / counter.peak:.3%}"
            if counter.peak
            else ""
        )
        lines.append(f"step {s.step}: outside attention {rest:.4g} vs counted {c_rest:.4g} FLOP (ratio "
                     f"{ratios[-1]:.4f}); {seen}; {s.seconds:.2f} s{mfu}")  # fmt: skip
    ok = bool(ratios) and len(ratios) == len(counter.steps) and all(abs(r - 1) < 0.005 for r in ratios)
    emit({"outcome": "ok" if ok else "DIFF", "numbers": "\n    ".join(lines)})


MEMORY_T = 4096  # the memory step's width: the reference run's scale on the 6-layer model


def step_memory(work: Path, budget_s: float, emit: Emit) -> None:
    """The memory ledger's predicted peak against the card's own count: one LoRA training step (PEFT
    all-linear, bf16 weights, fused AdamW, SDPA) of B=1 x MEMORY_T, with and without activation
    checkpointing, its steady-state step measured by `torch.cuda.max_memory_allocated` (the CPU
    rehearsal: MemTracker); what torch reserved beyond it is the allocator's share the ledger reports
    as unknown."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tuneproof.arch import resolve
    from tuneproof.hardware.card import CPU, of_capability
    from tuneproof.memory.step import step_memory
    from tuneproof.runs.run import Run
    from tuneproof.runs.step import Precision, Training

    model = resolve(work / "model" / "config.json")
    cap, _ = _cuda_facts()
    card = of_capability(cap) if DEVICE == "cuda" and cap is not None else CPU
    lines, worst = [], 0.0
    for ckpt in (False, True):
        net = AutoModelForCausalLM.from_pretrained(
            work / "model", dtype=torch.bfloat16, attn_implementation="sdpa"
        )
        net = net.to(DEVICE).train()
        if ckpt:
            net.gradient_checkpointing_enable()
        net = get_peft_model(net, LoraConfig(r=16, target_modules="all-linear", lora_dropout=0.0))
        opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=1e-4,
                                fused=DEVICE == "cuda")  # fmt: skip
        ids = torch.randint(2, 500, (1, MEMORY_T), device=DEVICE)
        measured, reserved = _measured_step(net, opt, ids)
        flags = Run.of_flags(
            attn="sdpa", mode="lora", seq_len=MEMORY_T, micro_batch=1, lora_r=16, grad_ckpt=ckpt,
            targets=("all-linear",), precision=Precision(dtype="bf16", autocast=None),
            training=Training(optimizer_impl="fused" if DEVICE == "cuda" else "for-loop"),
        )  # fmt: skip
        got = step_memory(model, flags.step(), card=card)
        error = got.peak.peak_bytes / measured - 1
        worst = max(worst, abs(error))
        lines.append(f"ckpt={ckpt}: predicted {got.peak.peak_bytes / 2**30:.2f} GiB at {got.peak.where}, "
                     f"measured {measured / 2**30:.2f} GiB ({error:+.1%}), reserved beyond it "
                     f"{reserved / 2**30:.2f} GiB")  # fmt: skip
        del net, opt
    emit({"outcome": "ok" if worst <= 0.10 else "DIFF", "numbers": "\n    ".join(lines)})


def _measured_step(net: Any, opt: Any, ids: Any) -> tuple[int, int]:
    """A first step (the optimizer's states), then the peak of a second one: (allocated, reserved
    beyond it) on CUDA; MemTracker's peak total on the CPU (no allocator to reserve)."""
    import torch

    def step() -> None:
        net(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad()

    step()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return (
            torch.cuda.max_memory_allocated(),
            torch.cuda.max_memory_reserved() - torch.cuda.max_memory_allocated(),
        )
    from torch.distributed._tools.mem_tracker import MemTracker

    class NoHook:
        def remove(self) -> None:
            pass

    # MemTracker hooks every parameter's gradient, which torch refuses on LoRA's frozen base: no-ops there
    names = ("register_hook", "register_post_accumulate_grad_hook")
    saved = {n: getattr(torch.Tensor, n) for n in names}
    for n, orig in saved.items():
        setattr(torch.Tensor, n, lambda t, hook, orig=orig: orig(t, hook) if t.requires_grad else NoHook())
    try:
        tracker = MemTracker()
        tracker.track_external(net, opt)
        with tracker:
            step()
        (per_device,) = tracker.get_tracker_snapshot("peak").values()
    finally:
        for n, orig in saved.items():
            setattr(torch.Tensor, n, orig)
    return next(v for k, v in per_device.items() if str(getattr(k, "value", k)) == "Total"), 0
