"""On-disk cache of the bundled tiny models.

Location: ``$PRIVNLP_CACHE_DIR`` if set, else the user cache dir (``platformdirs.user_cache_dir
("privnlp")`` when platformdirs is installed, ``~/.cache/privnlp`` otherwise). Entries live in
``<cache_dir>/models/<kind>-<key>/`` where ``key`` is the sha256 of the JSON config + seed +
privnlp version (+ torch/transformers/tokenizers/numpy versions, so an upgrade never loads stale
pickles, + the pinned torch thread count and CPU kernel family, see :mod:`privnlp.core.numerics`;
builds run with those threads pinned). An entry is built in a temporary sibling directory and renamed into place; it holds a
``privnlp-cache.json`` manifest, written last, with the sha256 of every file. An entry whose
manifest is missing, unreadable or does not match its files (interrupted / corrupted build) is
deleted and rebuilt. No torch import at module level.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

try:  # optional: without it the cache lives in ~/.cache/privnlp
    import platformdirs
except ImportError:  # pragma: no cover - platformdirs comes with most environments
    platformdirs = None

import privnlp
from privnlp.core.errors import InvalidArgument
from privnlp.core.numerics import numerics_fingerprint, pinned_threads, source_fingerprint

__all__ = ["cache_dir", "cache_key", "entry_dir", "get_or_build", "MANIFEST"]

MANIFEST = "privnlp-cache.json"


def cache_dir() -> Path:
    """The privnlp cache root (created if missing). ``PRIVNLP_CACHE_DIR`` overrides the default."""
    env = os.environ.get("PRIVNLP_CACHE_DIR")
    if env:
        root = Path(env).expanduser()
    elif platformdirs is not None:
        root = Path(platformdirs.user_cache_dir("privnlp", appauthor=False))
    else:
        root = Path.home() / ".cache" / "privnlp"
    root.mkdir(parents=True, exist_ok=True)
    return root


def _versions() -> dict[str, str]:
    out = {"privnlp": privnlp.__version__}
    for pkg in ("torch", "transformers", "tokenizers"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # pragma: no cover
            out[pkg] = "missing"
    # issue #17: builds run with pinned torch threads; the thread count and CPU kernel family decide
    # the trained weights' bits, so an entry built under other numerics is never reused
    out.update({k: str(v) for k, v in numerics_fingerprint().items()})
    out["code"] = source_fingerprint("models", "data")  # a builder/corpus change rebuilds the entry
    return out


def cache_key(kind: str, config: dict[str, Any], seed: int) -> str:
    """sha256 hex of ``{kind, config, seed, versions}`` as canonical JSON."""
    payload = json.dumps(
        {"kind": kind, "config": config, "seed": int(seed), "versions": _versions()},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def entry_dir(kind: str, config: dict[str, Any], seed: int) -> Path:
    """Where the entry for ``(kind, config, seed)`` lives (it may not exist)."""
    if not kind or any(c in kind for c in "/\\ ") or kind.startswith("."):
        raise InvalidArgument(f"kind must be a plain name; got {kind!r}")
    return cache_dir() / "models" / f"{kind}-{cache_key(kind, config, seed)[:24]}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _file_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): _sha256(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def is_valid(path: Path) -> bool:
    """Whether ``path`` is a complete entry whose files match its manifest."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        return bool(manifest["files"]) and manifest["files"] == _file_hashes(path)
    except (OSError, ValueError, KeyError, TypeError):
        return False


def get_or_build(
    kind: str,
    config: dict[str, Any],
    seed: int,
    build: Callable[[Path], None],
    load: Callable[[Path], Any],
) -> Any:
    """Load the cached entry, or call ``build(tmp_dir)`` to write it and publish it atomically.

    ``load`` must raise if the entry cannot be used; a failing load of a valid-looking entry is
    treated as corruption once (entry deleted, rebuilt, loaded again).
    """
    final = entry_dir(kind, config, seed)
    for attempt in range(2):
        if final.exists() and is_valid(final):
            try:
                return load(final)
            except Exception:
                if attempt:
                    raise
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            with pinned_threads():  # issue #17: thread count changes the trained weights
                build(tmp)
            manifest = {
                "kind": kind,
                "config": config,
                "seed": int(seed),
                "versions": _versions(),
                "files": _file_hashes(tmp),
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
            try:
                os.replace(tmp, final)
            except OSError:  # another process published the same entry meanwhile: use theirs
                if not is_valid(final):
                    raise
        finally:
            with contextlib.suppress(OSError):
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
    return load(final)
