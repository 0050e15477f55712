"""Tokenizers and a chat dataset for trying `tuneproof tokens` without a download (word-level
tokenizers built with the `tokenizers` library, the ones the tests use).

    .venv/bin/python examples/tokens/make_data.py OUT_FOLDER

Writes into OUT_FOLDER (which must be empty or new):
- `chatml/`: an instruct tokenizer (EOS <|im_end|>, the ChatML template with {% generation %}
  markers) and a tiny model config with tied embeddings whose embedding rows stop one short of the
  tokenizer: its last token, <tool>, was added after the model was trained;
- `llama3-base/`: a base tokenizer (EOS <|end_of_text|>) with a Llama-3-like template that ends turns
  with <|eot_id|> and has no generation markers, as the stock templates have none;
- `chats.jsonl`: 200 user/assistant chats; 6 have a prompt of 80 words, and one uses <tool>.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "tests"))


def make(out: Path) -> None:
    import tiny_tokenizers as tt

    chatml = tt.tokenizer("chatml", True, extra=("<tool>",))
    tt.save(chatml, out / "chatml", rows=len(chatml) - 1, tied=True)
    tt.save(tt.tokenizer("llama3", False, eos="<|end_of_text|>"), out / "llama3-base")
    rows = tt.chats(200, seed=7)
    rng = random.Random(7)
    for i in range(3, 200, 33):  # prompts of 80 words: their answers fall past max_length 64
        rows[i]["messages"][-2]["content"] = tt.words(rng, 80, 80)
    rows[50]["messages"][-1]["content"] += " <tool>"
    (out / "chats.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: make_data.py OUT_FOLDER", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"error: {out} is not an empty folder (nothing was written)", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    make(out)
    print(f"wrote chatml/, llama3-base/ and chats.jsonl into {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
