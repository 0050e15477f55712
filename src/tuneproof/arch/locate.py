"""Where a config named by the user lies: a local file or folder, or a Hugging Face hub id
(`owner/name`, optionally `@revision`) read from the local Hugging Face cache, never downloaded.

An existing local path always wins over a hub id. The cache folder is the one huggingface_hub would
use, computed when a config is looked up (huggingface_hub reads its environment once, at import):
`HF_HUB_CACHE`, else `HF_HOME/hub`, else `XDG_CACHE_HOME/huggingface/hub`, else
`~/.cache/huggingface/hub` (huggingface_hub's `constants.py`). The cache layout
(`models--owner--name/refs/<revision>` -> `snapshots/<commit>/config.json`) is read by
huggingface_hub's own `try_to_load_from_cache`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tuneproof.core.errors import TuneproofError

CONFIG_NAME = "config.json"


@dataclass(frozen=True, slots=True)
class HubId:
    """A model repository on the Hugging Face hub and the revision asked for (a branch, tag or
    commit; None = "main", as huggingface_hub reads it)."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo_id if self.revision is None else f"{self.repo_id}@{self.revision}"


def hub_cache_dir() -> Path:
    """The hub cache folder huggingface_hub uses under the current environment."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(os.path.expandvars(home)).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


def hub_id(text: str | Path) -> HubId | None:
    """`text` read as `owner/name[@revision]` (or a bare legacy `name`), or None when it cannot name
    a hub repository (huggingface_hub's `validate_repo_id` is the judge)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    repo_id, at, revision = str(text).partition("@")
    if at and not revision.strip():
        return None
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return None
    return HubId(repo_id, revision if at else None)


def locate_config(source: str | Path) -> Path:
    """The file to read for `source`: the path itself, its folder's config.json, or the cached
    config.json of the hub id it names. A path that names nothing and no hub id is returned as is,
    for the reader to report as not found."""
    path = Path(source)
    try:
        exists = path.exists()
    except (OSError, ValueError) as e:  # a name too long for the file system, a NUL byte
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise TuneproofError(
            f"the config path ({len(str(source))} characters) cannot be read: {reason}",
            "pass a config.json, its folder, or a hub id such as owner/name",
        ) from None
    if exists:
        return path / CONFIG_NAME if path.is_dir() else path
    repo = hub_id(source)
    return path if repo is None else cached_config(repo)


def cached_config(repo: HubId) -> Path:
    """config.json of `repo` from the local hub cache, or a one-line error naming the cache folder."""
    from huggingface_hub import try_to_load_from_cache

    cache = hub_cache_dir()
    found = try_to_load_from_cache(repo.repo_id, CONFIG_NAME, cache_dir=cache, revision=repo.revision)
    if isinstance(found, str):
        return Path(found)
    folder = "models--" + repo.repo_id.replace("/", "--")
    if not (cache / folder).is_dir():
        problem = f"the Hugging Face cache {cache} holds no {folder}"
    else:
        revision = repo.revision or "main"
        problem = f"{cache / folder} holds no {CONFIG_NAME} for revision {revision!r}"
    fetch = f"`hf download {repo.repo_id} {CONFIG_NAME}`"
    if repo.revision is not None:
        fetch += f" at revision {repo.revision}"
    raise TuneproofError(
        f"config not found: {repo} is not a local file or folder, and {problem}",
        f"configs are read from the cache, never downloaded: pass the folder holding its {CONFIG_NAME}, "
        f"fetch it once with {fetch}, or set HF_HUB_CACHE to the cache that has it",
    )
