"""What a step runs: `RunSpec` (width, batch, padding, attention path, training mode)."""

from __future__ import annotations

from dataclasses import dataclass

from tuneproof.errors import TuneproofError
from tuneproof.flops.attention import ATTN_PATHS

MODES = ("forward", "full", "lora")


@dataclass(frozen=True, slots=True)
class RunSpec:
    """One micro-batch step.

    `seq_len` is the padded width T every sequence of the micro-batch is padded to; real lengths
    come from `lengths` when given, else from `padding_fraction` (share of the B*T token slots
    that are padding, spread evenly over the sequences). `mode`: forward (no backward), full
    (every weight trains), lora (frozen base, adapters of `lora_rank` on `lora_targets`, PEFT
    target_modules semantics, "all-linear" = every nn.Linear but the LM head).
    """

    seq_len: int
    batch: int = 1
    attn: str = "sdpa"
    padding_fraction: float = 0.0
    mode: str = "full"
    lora_rank: int = 16
    lora_targets: tuple[str, ...] = ("all-linear",)
    grad_ckpt: bool = False
    lengths: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.seq_len <= 0:
            raise TuneproofError(
                f"--seq-len must be > 0, got {self.seq_len}", "pass the padded width in tokens"
            )
        if self.batch <= 0:
            raise TuneproofError(f"--batch must be > 0, got {self.batch}", "pass sequences per micro-batch")
        if not 0.0 <= self.padding_fraction < 1.0:
            raise TuneproofError(
                f"--padding-fraction must be in [0, 1), got {self.padding_fraction}",
                "pass the share of token slots that are padding, e.g. 0.3",
            )
        if self.attn not in ATTN_PATHS:
            raise TuneproofError(f"--attn {self.attn!r} is not known", "use one of: " + ", ".join(ATTN_PATHS))
        if self.mode not in MODES:
            raise TuneproofError(f"--mode {self.mode!r} is not known", "use one of: " + ", ".join(MODES))
        if self.mode == "lora" and self.lora_rank <= 0:
            raise TuneproofError(f"--lora-rank must be > 0, got {self.lora_rank}", "pass the adapter rank r")
        if self.grad_ckpt and self.mode == "forward":
            raise TuneproofError("--grad-ckpt needs a backward pass", "use --mode full or --mode lora")
        if self.lengths is not None:
            if len(self.lengths) != self.batch:
                raise TuneproofError(
                    f"{len(self.lengths)} lengths for batch {self.batch}", "give one length per sequence"
                )
            if any(n <= 0 or n > self.seq_len for n in self.lengths):
                raise TuneproofError(
                    "every length must be in [1, seq_len]", "check the lengths against --seq-len"
                )

    def real_lengths(self) -> list[int]:
        """Real (unpadded) length of each sequence."""
        if self.lengths is not None:
            return list(self.lengths)
        real = round(self.batch * self.seq_len * (1.0 - self.padding_fraction))
        real = max(real, self.batch)
        base, extra = divmod(real, self.batch)
        return [base + (1 if i < extra else 0) for i in range(self.batch)]

    @property
    def real_tokens(self) -> int:
        return sum(self.real_lengths())

    @property
    def padded_tokens(self) -> int:
        return self.batch * self.seq_len
