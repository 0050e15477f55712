"""The `$ tuneproof ...` examples of a docs page: each command with the lines the page shows under it."""

from __future__ import annotations


def dollar_examples(page: str) -> list[tuple[str, str]]:
    """(command, expected output) for every `$ tuneproof` line in the page's code blocks."""
    pairs: list[tuple[str, str]] = []
    for block in page.split("```")[1::2]:
        lines = block.strip("\n").split("\n")
        for i, line in enumerate(lines):
            if line.startswith("$ tuneproof "):
                end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("$ ")), len(lines))
                pairs.append((line[len("$ tuneproof ") :], "\n".join(lines[i + 1 : end]) + "\n"))
    return pairs
