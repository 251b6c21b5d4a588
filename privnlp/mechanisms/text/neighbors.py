"""Nearest neighbours of noisy vectors among a public vocabulary.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (Algorithm 1 step 5: the first and
second nearest neighbours of the noisy embedding; Algorithm 3: the first k). Candidates come from
the noisy vector alone; the index is built from the public vocabulary only, so using an
approximate index (hnswlib) is post-processing and keeps the metric-DP claim (it costs utility /
recall, which :func:`topk_recall` measures).

Exact search is hand-written because no library does batched, chunked float32 top-k over a
dense matrix with precomputed norms as fast as a plain BLAS matmul + two ``argmin`` passes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MissingDependency, check_range

from .embeddings import Embeddings

__all__ = ["NeighborResult", "ExactIndex", "HnswIndex", "make_index", "topk_recall"]


@dataclass(frozen=True)
class NeighborResult:
    """``ids[i, r]`` = the (r+1)-th nearest vocabulary row of query i; ``dists`` = Euclidean distances."""

    ids: np.ndarray
    dists: np.ndarray


def _exact_dists(emb: Embeddings, q: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Euclidean distances recomputed in float64 for the selected rows (cheap: B x k x d)."""
    diff = emb.vectors[ids].astype(np.float64) - q.astype(np.float64)[:, None, :]
    return np.sqrt(np.einsum("bkd,bkd->bk", diff, diff))


class ExactIndex:
    """Exact Euclidean k-NN: ``-2 X E^T + ||e||^2`` in float32 blocks of queries, then top-k
    (two ``argmin`` passes for k <= 2, ``argpartition`` otherwise); final distances in float64."""

    def __init__(self, embeddings: Embeddings, block_bytes: int = 160 << 20) -> None:
        self.embeddings = embeddings
        self.block_bytes = block_bytes

    def _prep(self) -> tuple[np.ndarray, np.ndarray]:
        cache = self.embeddings._cache
        if "neg2E_aug" not in cache:  # [-2E | ||e||^2]: one matmul gives ||e||^2 - 2 q.e (no extra pass)
            v = self.embeddings.vectors
            cache["neg2E_aug"] = np.ascontiguousarray(np.hstack([-2.0 * v, self.embeddings.sq_norms[:, None]]),
                                                      dtype=np.float32)
        return cache["neg2E_aug"], self.embeddings.sq_norms

    def query(self, q: np.ndarray, k: int) -> NeighborResult:
        emb = self.embeddings
        n = len(emb)
        if k > n:
            raise InvalidArgument(f"k must be <= the vocabulary size {n}; got {k}")
        q = np.ascontiguousarray(q, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != emb.dim:
            raise InvalidArgument(f"queries must have shape (B, {emb.dim}); got {q.shape}")
        neg2E, sq = self._prep()
        B = q.shape[0]
        qa = np.empty((B, emb.dim + 1), dtype=np.float32)
        qa[:, :-1] = q
        qa[:, -1] = 1.0
        out = np.empty((B, k), dtype=np.int64)
        block = max(1, min(B, self.block_bytes // (4 * n)))
        buf = np.empty((block, n), dtype=np.float32)
        rows = np.arange(block)
        for s in range(0, B, block):
            qb = qa[s:s + block]
            b = qb.shape[0]
            S = buf[:b]
            np.matmul(qb, neg2E.T, out=S)
            if k <= 2:
                i1 = S.argmin(axis=1)
                out[s:s + b, 0] = i1
                if k == 2:
                    S[rows[:b], i1] = np.inf
                    out[s:s + b, 1] = S.argmin(axis=1)
            else:
                part = np.argpartition(S, k - 1, axis=1)[:, :k]
                vals = np.take_along_axis(S, part, axis=1)
                order = np.argsort(vals, axis=1, kind="stable")
                out[s:s + b] = np.take_along_axis(part, order, axis=1)
        d = _exact_dists(emb, q, out)
        if k > 1:  # float32 near-ties: reorder by the float64 distances
            order = np.argsort(d, axis=1, kind="stable")
            out = np.take_along_axis(out, order, axis=1)
            d = np.take_along_axis(d, order, axis=1)
        return NeighborResult(out, d)


class HnswIndex:
    """Approximate k-NN with hnswlib (``pip install 'privnlp[ann]'``), built once per vocabulary
    and parameter set from the public vectors (post-processing: the claim is unchanged)."""

    def __init__(self, embeddings: Embeddings, ef: int = 64, M: int = 16, ef_construction: int = 100,
                 num_threads: int = 2, seed: int = 0) -> None:
        check_range("ef", ef, 1, 100000, integer=True)
        self.embeddings = embeddings
        self.ef = ef
        self.M = M
        self.ef_construction = ef_construction
        self.num_threads = num_threads
        self.seed = seed

    def _index(self) -> Any:
        key = ("hnsw", self.M, self.ef_construction, self.seed)
        cache = self.embeddings._cache
        if key not in cache:
            try:
                import hnswlib
            except ImportError as e:  # pragma: no cover - depends on extras
                raise MissingDependency("hnswlib", "ann") from e
            n, d = self.embeddings.vectors.shape
            idx = hnswlib.Index(space="l2", dim=d)
            idx.init_index(max_elements=n, ef_construction=self.ef_construction, M=self.M, random_seed=self.seed)
            idx.set_num_threads(self.num_threads)
            idx.add_items(self.embeddings.vectors, np.arange(n))
            cache[key] = idx
        return cache[key]

    def query(self, q: np.ndarray, k: int) -> NeighborResult:
        idx = self._index()
        idx.set_ef(max(self.ef, k))
        q = np.ascontiguousarray(q, dtype=np.float32)
        labels, _ = idx.knn_query(q, k=k, num_threads=self.num_threads)
        labels = labels.astype(np.int64)
        d = _exact_dists(self.embeddings, q, labels)
        if k > 1:
            order = np.argsort(d, axis=1, kind="stable")
            labels = np.take_along_axis(labels, order, axis=1)
            d = np.take_along_axis(d, order, axis=1)
        return NeighborResult(labels, d)


def make_index(embeddings: Embeddings, index: str = "exact", **kw: Any) -> Any:
    if index == "exact":
        return ExactIndex(embeddings)
    if index == "hnsw":
        return HnswIndex(embeddings, **kw)
    raise InvalidArgument(f"index must be 'exact' or 'hnsw'; got {index!r}")


def topk_recall(approx: NeighborResult, exact: NeighborResult) -> float:
    """Fraction of the exact top-k ids found in the approximate top-k (set recall per query)."""
    k = exact.ids.shape[1]
    hit = (approx.ids[:, :, None] == exact.ids[:, None, :]).any(axis=1)
    return float(hit.sum() / (exact.ids.shape[0] * k))
