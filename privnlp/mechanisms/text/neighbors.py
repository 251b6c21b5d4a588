"""Nearest neighbours of noisy vectors among a public vocabulary.

Paper: ``../shared/papers/vickrey-mechanism-metric-dp.txt`` (Algorithm 1 step 5: the first and
second nearest neighbours of the noisy embedding; Algorithm 3: the first k). Candidates come from
the noisy vector alone; the index is built from the public vocabulary only, so using an
approximate index (hnswlib, faiss) is post-processing and keeps the metric-DP claim (it costs
utility / recall, which :func:`topk_recall` measures).

Exact search is hand-written because no library does batched, chunked float32 top-k over a
dense matrix with precomputed norms as fast as a plain BLAS matmul + two ``argmin`` passes.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextlib import nullcontext as _nc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MissingDependency, check_range

from .embeddings import Embeddings, _cache_root

__all__ = [
    "NeighborResult",
    "ExactIndex",
    "HnswIndex",
    "FaissIndex",
    "TorchIndex",
    "Calibration",
    "calibrate_param",
    "make_index",
    "topk_recall",
    "RECALL_TARGET",
    "NPROBE_LADDER",
    "EF_LADDER",
]

#: no approximate index of the package runs below this top-k recall by default (issue #31)
RECALL_TARGET = 0.99
#: ``nprobe`` values tried, smallest first, when calibrating an IVF index
NPROBE_LADDER = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: hnswlib ``ef`` values tried when calibrating an HNSW graph
EF_LADDER = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


@dataclass(frozen=True)
class NeighborResult:
    """``ids[i, r]`` = the (r+1)-th nearest vocabulary row of query i; ``dists`` = Euclidean distances.

    Attributes:
        ids: ``[B, k]`` vocabulary row ids, nearest first.
        dists: ``[B, k]`` Euclidean distances (float64, exact for the ids returned).
    """

    ids: np.ndarray
    dists: np.ndarray


def _exact_dists(emb: Embeddings, q: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Euclidean distances recomputed in float64 for the selected rows (cheap: B x k x d)."""
    out = np.empty(ids.shape, dtype=np.float64)
    step = 1024  # chunked: a (B, k, d) float64 temporary for a large batch is slower than the maths
    for s in range(0, ids.shape[0], step):
        diff = (
            emb.vectors[ids[s : s + step]].astype(np.float64)
            - q[s : s + step].astype(np.float64)[:, None, :]
        )
        out[s : s + step] = np.einsum("bkd,bkd->bk", diff, diff)
    return np.sqrt(out)


def _check_queries(emb: Embeddings, q: Any, k: int) -> np.ndarray:
    """Validated ``(B, dim)`` float32 queries for a top-``k`` search."""
    check_range("k", k, 1, math.inf, integer=True)
    if k > len(emb):
        raise InvalidArgument(f"k must be <= the vocabulary size {len(emb)}; got {k}")
    q = np.ascontiguousarray(q, dtype=np.float32)
    if q.ndim != 2 or q.shape[1] != emb.dim:
        raise InvalidArgument(f"queries must have shape (B, {emb.dim}); got {q.shape}")
    if not np.isfinite(q).all():
        raise InvalidArgument("queries must be finite")
    return q


def _pair_sq_dists(
    vectors: np.ndarray, rows: np.ndarray, q64: np.ndarray, qi: np.ndarray
) -> np.ndarray:
    """``||vectors[rows[i]] - q64[qi[i]]||^2`` in float64 from difference vectors (the brute-force
    definition the exact search must match), chunked."""
    d2 = np.empty(rows.size, dtype=np.float64)
    step = 1 << 14
    for a in range(0, rows.size, step):
        diff = vectors[rows[a : a + step]].astype(np.float64) - q64[qi[a : a + step]]
        d2[a : a + step] = np.einsum("ij,ij->i", diff, diff)
    return d2


_U32 = 2.0**-24  # unit roundoff of float32
_U16 = 2.0**-8  # unit roundoff of bfloat16 (8-bit significand)

#: a float32 prescreen matrix up to this size is "small": it stays in the CPU caches while a block of
#: queries is scored, so the product is compute-bound and float32 BLAS beats oneDNN's bf16 on CPUs
#: without AMX (benchmarks/exact_small_vocab.py on the 2-core Xeon with AVX512-BF16, 1 thread: GloVe 20k x 50,
#: 60k noisy queries, 14.8k queries/s bf16 in 48 MiB blocks vs 37.0k fp32 in 8 MiB blocks; 20k x 300: 2.1x)
SMALL_PRESCREEN_BYTES = 32 << 20
#: the prescreen block of a small matrix: its scores (written by the GEMM, read by the group minima)
#: stay in cache too (fp32 in 48 MiB blocks was 2.3-2.7x slower on 20k x 50, alone or beside a second process; 4-16 MiB
#: blocks within 10% of each other)
SMALL_BLOCK_BYTES = 8 << 20


def _split3_bf16(x: np.ndarray) -> np.ndarray:
    """``x`` (float64) as three bfloat16-representable parts (float32 array ``(..., 3)``) whose sum
    is ``x`` up to ~2^-24 relative; the residual is measured by the caller."""
    import torch

    parts, r = [], x.astype(np.float64)
    for _ in range(3):
        p = torch.from_numpy(r.astype(np.float32)).bfloat16().float().numpy().astype(np.float64)
        parts.append(p)
        r = r - p
    return np.stack(parts, axis=-1)


def _split3_f32(x: np.ndarray) -> np.ndarray:
    """``x`` (float64) as three float32 parts (as float64 values), residual measured by the caller."""
    parts, r = [], x.astype(np.float64)
    for _ in range(3):
        p = r.astype(np.float32).astype(np.float64)
        parts.append(p)
        r = r - p
    return np.stack(parts, axis=-1)


def _bf16_ok() -> bool:
    """bf16 GEMM through oneDNN (fp32 accumulation) available on this CPU?"""
    try:
        import torch

        return bool(
            torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
        )
    except Exception:  # pragma: no cover - torch missing / old
        return False


class ExactIndex:
    """Exact Euclidean k-NN by a cheap *certified* prescreen and an exact float64 re-rank.

    1. Prescreen scores ``s~_j ≈ ||q - e_j||^2 / 2`` for the whole vocabulary in one GEMM of
       augmented vectors ``[q~, 1, 1, 1, h1, h2, h3] . [-e~_j, c1_j, c2_j, c3_j, 1, 1, 1]`` where
       ``q~, e~`` are the inputs rounded to the GEMM precision and ``h*``/``c*`` split
       ``||q||^2/2`` and ``||e_j||^2/2`` exactly into three parts (``precision="bf16"``: bfloat16
       inputs on AMX/AVX512-BF16 via oneDNN, fp32 accumulation, bf16 output; ``"fp32"``: float32
       BLAS).
    2. A rigorous per-query bound ``m`` with ``|s~_j - s_j| <= m`` (up to the relative output
       rounding ``u_out``):
       ``m = ||q - q~|| max_j ||e_j|| + ||q~|| max_j ||e_j - e~_j|| + (split residuals)
       + K 2^-23 (||q~|| max_j ||e~_j|| + ||q||^2/2 + max_j ||e_j||^2/2)``
       (Cauchy-Schwarz for the input rounding; the standard ``gamma_K`` bound, doubled, for fp32
       accumulation in any order).
    3. With ``t_k`` = the k-th smallest of the group minima of ``s~`` (>= the k-th smallest
       score, since each group minimum is a distinct row), every row whose true score can be
       <= the upper bound of ``t_k`` is a candidate; groups whose minimum is above the threshold
       are skipped without looking at their rows. Every true top-k row is a candidate.
    4. Candidates are re-scored in float64 and the first ``k`` by (distance, row id) returned —
       the same result as a brute-force float64 search (ties broken by the lower row id).

    ``precision="auto"`` uses fp32 for a small vocabulary (a float32 prescreen matrix of at most
    :data:`SMALL_PRESCREEN_BYTES`, e.g. 20k x 50 GloVe: it stays in cache and float32 BLAS is faster),
    else bf16 when oneDNN supports it on this CPU, else fp32. A small matrix is scanned in blocks of at
    most :data:`SMALL_BLOCK_BYTES` of scores. Neither choice changes the answer (it is exact).

    **Pruned search** (``strategy="pruned"``, the default for vocabularies of >= 2048 rows): the
    vocabulary is partitioned once into cells of about ``cell_size`` rows (two-level k-means on the
    public vectors only), with
    exact float64 centres ``mu_c`` and radii ``R_c = max_{j in c} ||e_j - mu_c||``. A query first
    scans its nearest cell of >= k rows in float64, which gives an upper bound ``U`` of its k-th
    neighbour distance; by the triangle inequality a cell can hold a row within ``U`` only if
    ``||q - mu_c|| - R_c <= U``, so only those cells are scanned (float64 norm expansion with a
    rigorous rounding margin), and the candidates are re-ranked by float64 difference norms —
    the same answer as the full scan. How much is skipped depends on the geometry (clustered
    vocabularies and moderate noise: most of it); a query whose cells would cover more than
    ``max_scan_fraction`` of the vocabulary is answered by the full certified scan instead, and a
    batch of > 512 queries whose 256-query probe says so goes to the full scan as a whole (GloVe
    at epsilon = 10: the cells' bounds reach ~97% of the vocabulary), so the worst case costs a
    probe. ``strategy="scan"`` always scans.

    Args:
        embeddings: the public vocabulary vectors.
        block_bytes: memory budget of one prescreen block, in bytes.
        precision: ``"auto"``, ``"bf16"`` or ``"fp32"`` (prescreen GEMM precision).
        group: rows per prescreen group, an integer in [2, 2**20].
        strategy: ``"auto"`` (pruned from 2,048 rows), ``"scan"`` or ``"pruned"``.
        cell_size: the target number of rows per k-means cell, an integer in [1, 2**30].
        max_scan_fraction: above this fraction of the vocabulary a pruned query falls back to the full scan,
            in [0, 1].
        seed: the k-means seed (the result does not depend on it, only the speed).

    Raises:
        InvalidArgument: an unknown ``precision`` / ``strategy`` or an argument out of range; (``query``) bad
            queries or ``k`` outside [1, vocabulary size].
    """

    def __init__(
        self,
        embeddings: Embeddings,
        block_bytes: int = 48 << 20,
        precision: str = "auto",
        group: int = 64,
        strategy: str = "auto",
        cell_size: int = 32,
        max_scan_fraction: float = 0.05,
        seed: int = 0,
    ) -> None:
        if precision not in ("auto", "bf16", "fp32"):
            raise InvalidArgument(f"precision must be 'auto', 'bf16' or 'fp32'; got {precision!r}")
        if strategy not in ("auto", "scan", "pruned"):
            raise InvalidArgument(f"strategy must be 'auto', 'scan' or 'pruned'; got {strategy!r}")
        check_range("group", group, 2, 1 << 20, integer=True)
        check_range("cell_size", cell_size, 1, 1 << 30, integer=True)
        check_range("max_scan_fraction", max_scan_fraction, 0.0, 1.0)
        self.embeddings = embeddings
        self.block_bytes = block_bytes
        self.precision = precision
        self.group = group
        self.strategy = strategy
        self.cell_size = cell_size
        self.max_scan_fraction = max_scan_fraction
        self.seed = seed

    def resolved_strategy(self) -> str:
        if self.strategy == "auto":
            return "pruned" if len(self.embeddings) >= 2048 else "scan"
        return self.strategy

    def small_prescreen(self) -> bool:
        """Whether the float32 prescreen matrix (rows padded to the group, ``d + 6`` columns) has at
        most :data:`SMALL_PRESCREEN_BYTES`."""
        n, d = self.embeddings.vectors.shape
        n_pad = -(-n // int(self.group)) * int(self.group)
        return n_pad * (d + 6) * 4 <= SMALL_PRESCREEN_BYTES

    def resolved_precision(self) -> str:
        if self.precision == "auto":
            return "bf16" if _bf16_ok() and not self.small_prescreen() else "fp32"
        return self.precision

    def _prep(self) -> dict:
        prec = self.resolved_precision()
        key = ("exact_prescreen", prec, int(self.group))
        cache = self.embeddings._cache
        if key in cache:
            return cache[key]
        import torch

        v = self.embeddings.vectors  # float32, possibly a read-only memory map: never copied whole
        n, d = v.shape
        G = int(self.group)
        W = -(-n // G)
        n_pad = W * G
        K = d + 6
        if prec == "bf16":
            K = -(-K // 32) * 32  # AMX tile width
        # the transposed prescreen matrix is filled in row chunks: no (n, d) float64 copy and no
        # (n, K) float32 temporary (on GloVe-400k these temporaries were ~0.6 GiB of peak memory)
        tdt = torch.bfloat16 if prec == "bf16" else torch.float32
        AT = torch.zeros((K, n_pad), dtype=tdt)
        if n_pad > n:
            AT[d, n:] = 2.0**100  # padding rows: a huge score, never a candidate
        max_e2 = max_r2 = max_et2 = max_hsq = max_sq_res = 0.0
        step = 1 << 15
        for a in range(0, n, step):
            vc = np.asarray(v[a : a + step], dtype=np.float32)
            v64 = vc.astype(np.float64)
            half_sq = 0.5 * np.einsum("ij,ij->i", v64, v64)
            if prec == "bf16":
                vr = (
                    torch.from_numpy(np.require(vc, np.float32, ["C", "W"]))
                    .bfloat16()
                    .float()
                    .numpy()
                    .astype(np.float64)
                )
                sq_parts = _split3_bf16(half_sq)
            else:
                vr = v64
                sq_parts = _split3_f32(half_sq)
            A = np.zeros((len(vc), K), dtype=np.float32)
            A[:, :d] = -vr
            A[:, d : d + 3] = sq_parts
            A[:, d + 3 : d + 6] = 1.0
            AT[:, a : a + len(vc)] = (
                torch.from_numpy(A).to(tdt).T
            )  # exact: A holds values of the GEMM precision
            max_e2 = max(max_e2, float((2.0 * half_sq).max()))
            max_r2 = max(max_r2, float(((v64 - vr) ** 2).sum(axis=1).max()))
            max_et2 = max(max_et2, float((vr**2).sum(axis=1).max()))
            max_hsq = max(max_hsq, float(half_sq.max()))
            max_sq_res = max(max_sq_res, float(np.abs(half_sq - sq_parts.sum(axis=1)).max()))
            del vc, v64, vr, A, sq_parts, half_sq
        AT = AT.contiguous()
        stats = {
            "max_e": math.sqrt(max_e2),
            "max_r": math.sqrt(max_r2),
            "max_et": math.sqrt(max_et2),
            "max_hsq": max_hsq,
            "max_sq_res": max_sq_res,
        }
        cache[key] = {"prec": prec, "AT": AT, "n": n, "d": d, "K": K, "W": W, "G": G, **stats}
        return cache[key]

    def query(self, q: np.ndarray, k: int) -> NeighborResult:
        q = _check_queries(self.embeddings, q, k)
        folder = os.environ.get(MEMO_ENV)
        if folder and q.shape[0] >= MEMO_MIN_QUERIES:
            return _memo_query(Path(folder), self.embeddings, q, k, self._query)
        return self._query(q, k)

    def _query(self, q: np.ndarray, k: int) -> NeighborResult:
        emb = self.embeddings
        B = q.shape[0]
        ids = np.empty((B, k), dtype=np.int64)
        dists = np.empty((B, k), dtype=np.float64)
        if B == 0:
            return NeighborResult(ids, dists)
        if self.resolved_strategy() == "pruned" and k <= len(emb):
            if B > 512 and not self._prune_pays(
                q, k
            ):  # decided once per call, on a 256-query probe
                return self._scan(q, k)
            # blocks sized so that the (block, cells) float32 centre scores stay within block_bytes
            step = max(1024, min(8192, int(self.block_bytes) // (4 * self._cells()["C"])))
            for s in range(0, B, step):
                i, dd = self._pruned_block(q[s : s + step], k)
                ids[s : s + step] = i
                dists[s : s + step] = dd
            return NeighborResult(ids, dists)
        return self._scan(q, k)

    def _scan(self, q: np.ndarray, k: int) -> NeighborResult:
        B = q.shape[0]
        ids = np.empty((B, k), dtype=np.int64)
        dists = np.empty((B, k), dtype=np.float64)
        if B == 0:
            return NeighborResult(ids, dists)
        P = self._prep()
        bytes_per_q = P["W"] * P["G"] * (2 if P["prec"] == "bf16" else 4)
        budget = int(self.block_bytes)
        if self.small_prescreen():  # the block's scores stay in cache (see SMALL_BLOCK_BYTES)
            budget = min(budget, SMALL_BLOCK_BYTES)
        block = max(1, min(B, budget // bytes_per_q))
        for s in range(0, B, block):
            i, dd = self._query_block(P, q[s : s + block], k)
            ids[s : s + block] = i
            dists[s : s + block] = dd
        return NeighborResult(ids, dists)

    # ---------------------------------------------------------------- pruned (cells + bounds)
    def _cells(self) -> dict:
        key = ("exact_cells", int(self.cell_size), int(self.seed))
        cache = self.embeddings._cache
        if key in cache:
            return cache[key]
        v = self.embeddings.vectors  # float32 (memory map): read in chunks, never copied to float64
        v = v if v.dtype == np.float32 else np.asarray(v, dtype=np.float32)
        assign = _cached_assign(
            self.embeddings, np.ascontiguousarray(v), int(self.cell_size), seed=int(self.seed)
        )
        C = int(assign.max()) + 1
        mu = _cell_means(v, assign, C)
        n = v.shape[0]
        step = 1 << 15
        rad0 = np.empty(n, dtype=np.float64)
        for s in range(0, n, step):
            diff = v[s : s + step].astype(np.float64) - mu[assign[s : s + step]]
            rad0[s : s + step] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        order = np.lexsort((rad0, assign))  # by cell, then by distance to the cell's centre
        counts = np.bincount(assign, minlength=C)
        starts = np.concatenate([[0], np.cumsum(counts)])
        vs32 = np.ascontiguousarray(
            v[order], dtype=np.float32
        )  # rows by cell (float32: exact in float64)
        rad = rad0[order]
        del rad0
        R = np.zeros(C, dtype=np.float64)
        ne = counts > 0
        R[ne] = np.maximum.reduceat(rad, starts[:-1][ne])
        R = R * (1 + 1e-12) + 1e-300
        en = np.empty(n, dtype=np.float64)
        for s in range(0, n, step):
            x = vs32[s : s + step].astype(np.float64)
            en[s : s + step] = np.einsum("ij,ij->i", x, x)
        mun = np.einsum("ij,ij->i", mu, mu)
        R32 = (R * (1 + 1e-6)).astype(np.float32)
        R32 = np.nextafter(R32, np.float32(np.inf))
        # the per-cell float64 blocks (-2 e_j^T) are made when a cell is scanned, from vs32 (exact):
        # keeping them all would cost 8 n d bytes (157 MB on GloVe-400k)
        cache[key] = {
            "C": C,
            "order": order,
            "starts": starts,
            "counts": counts,
            "en": en,
            "mu": mu,
            "mun": mun,
            "R": R,
            "R32": R32,
            "muA": np.ascontiguousarray(np.vstack([-2.0 * mu.T, mun[None, :]]).astype(np.float32)),
            "vs32": vs32,
            "maxR": float(R.max()),
            "max_en": float(en.max()) if en.size else 0.0,
            "max_mun": float(mun.max()),
        }
        return cache[key]

    def _prune_pays(self, q: np.ndarray, k: int) -> bool:
        """Whether pruning pays for a batch, decided on 256 of its queries *before* any (batch, cells)
        centre GEMM (large noise relative to the cells, e.g. GloVe at epsilon = 10: it does not, and
        the batch goes to the full scan at the cost of a 256-query probe). Only the speed depends on
        this decision; both paths return the exact answer."""
        b = q.shape[0]
        smp = np.linspace(0, b - 1, 256).astype(np.int64)
        r = self._pruned_block(q[smp], k, reach_only=True)
        return bool(np.median(r) <= self.max_scan_fraction * len(self.embeddings))

    def _pruned_block(self, q: np.ndarray, k: int, reach_only: bool = False) -> Any:
        Pc = self._cells()
        C, counts, starts, R = Pc["C"], Pc["counts"], Pc["starts"], Pc["R"]
        n = len(self.embeddings)
        b, d = q.shape
        q64 = q.astype(np.float64)
        qn = np.einsum("ij,ij->i", q64, q64)
        big = math.sqrt(max(Pc["max_en"], Pc["max_mun"]))
        # rigorous rounding margins of the norm expansion ||q||^2 + ||x||^2 - 2 q.x (d-term dots):
        # tol in float64 (row scores), mq in float32 (centre distances); both generous
        tol = 4.0 * (d + 4) * 2.0**-52 * (np.sqrt(qn) + big) ** 2 + 1e-300
        mq = (4.0 * (d + 4) * 2.0**-23 * (np.sqrt(qn) + big) ** 2).astype(np.float32)
        # G = ||q - mu_c||^2 - ||q||^2 in one float32 GEMM of augmented vectors [q, 1] . [-2 mu_c, ||mu_c||^2]
        Xq = np.empty((b, d + 1), dtype=np.float32)
        Xq[:, :d] = q
        Xq[:, d] = 1.0
        G = Xq @ Pc["muA"]
        # an upper bound U of the k-th neighbour distance: the k-th smallest exact distance to the
        # (up to 4) most central rows of the nearest cell holding >= k rows (rows are stored by
        # distance to their cell's centre), or ||q - mu_c|| + R_c of that cell
        probe = G.argmin(axis=1)
        small = counts[probe] < k
        if small.any():
            hk = counts >= k
            if not hk.any():  # no cell holds k rows: full scan
                if reach_only:
                    return np.full(b, float(n))
                r = self._scan(q, k)
                return r.ids, r.dists
            probe[small] = np.where(hk[None, :], G[small], np.inf).argmin(axis=1)
        hi = np.sqrt(np.maximum(G[np.arange(b), probe].astype(np.float64) + qn + mq, 0.0))
        L = max(4, k)
        pos = starts[probe][:, None] + np.arange(L)[None, :]
        valid = np.arange(L)[None, :] < counts[probe][:, None]
        pos = np.where(valid, pos, starts[probe][:, None])
        diff = Pc["vs32"][pos] - q[:, None, :]  # float32; inflated below
        dd = np.einsum("ijk,ijk->ij", diff, diff).astype(np.float64)
        dd[~valid] = np.inf
        # float32 differences and sums: relative error <= (d + 2) * 2^-24; inflated generously
        Ur = np.sqrt(np.partition(dd, k - 1, axis=1)[:, k - 1] * (1 + (d + 8) * 2.0**-21))
        U = np.minimum(hi + R[probe], Ur) * (1 + 1e-9) + 1e-300

        # a cell can hold a row within U only if ||q - mu_c|| - R_c <= U, i.e. (float32, with the
        # margin mq twice: GEMM error + the rounding of this test) G <= (U + R_c)^2 + 2 mq - ||q||^2
        def need_mask(rows: Any) -> np.ndarray:
            T = (U[rows] * (1 + 1e-6)).astype(np.float32)[:, None] + Pc["R32"][None, :]
            T *= T
            T += (2.0 * mq[rows] - qn[rows]).astype(np.float32)[:, None]
            return G[rows] <= T

        if reach_only:  # rows each query would scan (the decision of _prune_pays)
            return need_mask(slice(None)) @ counts
        pq, pc = np.nonzero(need_mask(slice(None)))
        scan_rows = np.bincount(pq, weights=counts[pc], minlength=b)
        full = scan_rows > self.max_scan_fraction * n
        if full.any():
            keep = ~full[pq]
            pq, pc = pq[keep], pc[keep]
        o = np.argsort(pc, kind="stable")
        pq, pc = pq[o], pc[o]
        cs = np.searchsorted(pc, np.arange(C + 1))
        cand_q, cand_j, cand_s = [], [], []
        for c in np.nonzero(cs[1:] > cs[:-1])[0]:
            Q = pq[cs[c] : cs[c + 1]]
            S = q64[Q] @ (-2.0 * Pc["vs32"][starts[c] : starts[c + 1]].T.astype(np.float64))
            S += Pc["en"][starts[c] : starts[c + 1]][None, :]
            S += qn[Q, None]
            m = S.shape[1]
            if m > k:  # keep rows within 2 tol of the cell's k-th best score (near-ties included)
                sk = np.partition(S, k - 1, axis=1)[:, k - 1]
                qi, jj = np.nonzero(S <= (sk + 2.0 * tol[Q])[:, None])
            else:
                qi, jj = np.nonzero(np.ones(S.shape, dtype=bool))
            cand_q.append(Q[qi])
            cand_j.append(jj + starts[c])
            cand_s.append(S[qi, jj])
        cq = np.concatenate(cand_q) if cand_q else np.empty(0, np.int64)
        cj = np.concatenate(cand_j) if cand_j else np.empty(0, np.int64)
        cs_ = np.concatenate(cand_s) if cand_s else np.empty(0, np.float64)
        # global k-th best score per query; keep everything within 2 tol of it
        o = np.lexsort((cs_, cq))
        cq, cj, cs_ = cq[o], cj[o], cs_[o]
        start = np.searchsorted(cq, np.arange(b))
        cnt = np.diff(np.append(start, cq.size))
        ok = ~full
        if (cnt[ok] < k).any():  # cannot happen: the cell that gave U is scanned
            raise RuntimeError("pruned exact search lost candidates; please report")
        skq = np.full(b, -np.inf)
        skq[ok] = cs_[start[ok] + k - 1]
        keep = cs_ <= (skq + 2.0 * tol)[cq]
        cq, cj = cq[keep], cj[keep]
        # exact float64 re-rank by difference norms (the brute-force definition), ties -> lower id
        rows = Pc["order"][cj]
        d2 = _pair_sq_dists(self.embeddings.vectors, rows, q64, cq)
        o = np.lexsort((rows, d2, cq))
        cq, rows, d2 = cq[o], rows[o], d2[o]
        start = np.searchsorted(cq, np.arange(b))
        ids = np.empty((b, k), dtype=np.int64)
        dist = np.empty((b, k), dtype=np.float64)
        sel = start[ok][:, None] + np.arange(k)[None, :]
        ids[ok] = rows[sel]
        dist[ok] = np.sqrt(d2[sel])
        if full.any():
            r = self._scan(q[full], k)
            ids[full], dist[full] = r.ids, r.dists
        return ids, dist

    def _query_block(self, P: dict, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        d, K, W, G = P["d"], P["K"], P["W"], P["G"]
        b = q.shape[0]
        q64 = q.astype(np.float64)
        hq = 0.5 * np.einsum("ij,ij->i", q64, q64)
        if P["prec"] == "bf16":
            qt = torch.from_numpy(
                np.require(q, None, ["W"])
            ).bfloat16()  # rows of a read-only memmap
            qr = qt.float().numpy().astype(np.float64)
            u_out = _U16
        else:
            qr = q64
            u_out = _U32
        # rigorous bound on |exact sum of the augmented products - ||q - e_j||^2 / 2|
        nq_err = np.sqrt(((q64 - qr) ** 2).sum(axis=1))
        nqr = np.sqrt((qr**2).sum(axis=1))
        m0 = (
            nq_err * P["max_e"]
            + nqr * P["max_r"]
            + P["max_sq_res"]
            + 2.0 * K * _U32 * (nqr * P["max_et"] + 2.0 * (hq + P["max_hsq"]) + 3.0)
        )
        # offset c > bound: every computed score is > 0, so float order == integer order of the bits
        c = 4.0 * m0 + 1e-20
        hc = hq + c
        h_parts = _split3_bf16(hc) if P["prec"] == "bf16" else _split3_f32(hc)
        m = (m0 + np.abs(hc - h_parts.sum(axis=1)) + 4.0 * K * _U32 * c) * (1.0 + 1e-6) + 1e-30
        X = np.zeros((b, K), dtype=np.float32)
        X[:, :d] = qr
        X[:, d : d + 3] = 1.0
        X[:, d + 3 : d + 6] = h_parts
        Xt = torch.from_numpy(X)
        if P["prec"] == "bf16":
            Xt = Xt.bfloat16()
        S = torch.mm(Xt, P["AT"])  # (b, W*G) prescreen scores s~_j + c > 0
        # group minima (group g = rows g, g+W, ..., g+(G-1)W) on the integer view of the bits:
        # positive floats order like their bit patterns; numpy's int16 min is fast and exact
        if P["prec"] == "bf16":
            Sn = S.view(torch.int16).numpy().reshape(b, G, W)
            gmin = (Sn.min(axis=1).view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            Sn = S.numpy().reshape(b, G, W)
            gmin = Sn.min(axis=1)
        if k <= W:
            tk = np.partition(gmin, k - 1, axis=1)[:, k - 1].astype(np.float64)
        else:
            tk = np.partition(S.float().numpy(), k - 1, axis=1)[:, k - 1].astype(np.float64)
        # upper bound of the k-th smallest true score, then the largest s~ that can be <= it
        up = np.where(tk >= 0, tk / (1.0 - u_out), tk / (1.0 + u_out)) + m
        y = up + m
        thr = np.where(y >= 0, y * (1.0 + u_out), y * (1.0 - u_out))
        thr = np.nextafter(
            thr.astype(np.float32), np.float32(np.inf)
        )  # round up: stay conservative
        cq, cc = np.nonzero(gmin <= thr[:, None])  # candidate (query, group)
        if P["prec"] == "bf16":  # gather the groups' raw bf16 bits and widen them exactly to fp32
            vals = (Sn[cq, :, cc].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            vals = Sn[cq, :, cc]
        pi, gi = np.nonzero(vals <= thr[cq][:, None])
        pq = cq[pi]
        pj = cc[pi] + W * gi
        # exact float64 re-rank of the candidates
        d2 = _pair_sq_dists(self.embeddings.vectors, pj, q64, pq)
        order = np.lexsort((pj, d2, pq))
        pq, pj, d2 = pq[order], pj[order], d2[order]
        start = np.searchsorted(pq, np.arange(b))
        counts = np.diff(np.append(start, pq.size))
        if (counts < k).any():  # cannot happen (the k rows with the smallest s~ are candidates)
            raise RuntimeError("exact prescreen lost candidates; please report")
        sel = start[:, None] + np.arange(k)[None, :]
        return pj[sel], np.sqrt(d2[sel])


#: environment variable naming a folder where :meth:`ExactIndex.query` memoises its answers across
#: processes (``scripts/check_cards.py`` sets it: the quick cards of laplace_metric, vickrey and
#: vickrey_k ask the same Monte Carlo queries, k = 1, 2, 3); unset = no memo
MEMO_ENV = "PRIVNLP_EXACT_MEMO"
#: batches smaller than this are not memoised (the entry would cost more than the search)
MEMO_MIN_QUERIES = 4096
#: how long a process waits for another one that is computing the same entry (a stale lock, of a
#: killed process, costs at most this before the search runs here)
MEMO_WAIT_S = 300.0


def _memo_query(
    folder: Path, emb: Embeddings, q: np.ndarray, k: int, compute: Any
) -> NeighborResult:
    """``compute(q, k)`` memoised in ``folder`` by (vocabulary fingerprint, query bytes).

    The exact answer is unique (float64 distances, ties to the lower row id), so a memoised answer is
    the one a new search would return, bit for bit, and the first ``k`` columns of a top-``k'`` entry
    (``k' >= k``) are the top-``k`` answer. An entry is written atomically (temporary file +
    ``os.replace``); a process that finds another one computing the same entry (a ``.lock`` file
    holding that process's ``k``) waits for it when that ``k`` covers its own, else searches itself
    and keeps the entry with the larger ``k``."""
    h = hashlib.sha256()
    h.update(f"v1 {emb.fingerprint()} {q.shape[0]} {q.shape[1]}".encode())
    h.update(np.ascontiguousarray(q, dtype=np.float32).tobytes())
    path = folder / f"{h.hexdigest()[:32]}.npz"
    lock = path.with_suffix(".lock")

    def read() -> tuple[int, NeighborResult | None]:
        """``(k stored, the top-k answer or None)``; ``(0, None)`` when absent or unreadable."""
        try:
            with np.load(path) as z:
                ids, dists = z["ids"], z["dists"]
        except (OSError, ValueError, KeyError):  # absent, or unreadable: searched again
            return 0, None
        if ids.shape[0] != q.shape[0] or ids.shape[1] < k:
            return (ids.shape[1] if ids.shape[0] == q.shape[0] else 0), None
        return ids.shape[1], NeighborResult(
            ids[:, :k].astype(np.int64), np.ascontiguousarray(dists[:, :k])
        )

    hit = read()[1]
    if hit is not None:
        return hit
    folder.mkdir(parents=True, exist_ok=True)
    owner = True
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        owner = False
    if owner:
        atomic_k = lock.with_suffix(f".{os.getpid()}.tmp")
        atomic_k.write_text(str(k))
        os.replace(atomic_k, lock)  # the lock names the k it will hold
    else:
        t0 = time.monotonic()
        while time.monotonic() - t0 < MEMO_WAIT_S:
            hit = read()[1]
            if hit is not None:
                return hit
            try:
                text = lock.read_text()
                stale = time.time() - lock.stat().st_mtime > MEMO_WAIT_S
            except (
                OSError
            ):  # the lock is gone: the entry is written (read again) or the search failed
                hit = read()[1]
                if hit is not None:
                    return hit
                break
            if stale or (text and int(text) < k):
                break  # a killed process's lock, or fewer neighbours than needed here: search here
            time.sleep(0.05)
    try:
        res = compute(q, k)
        if read()[0] < k:  # keep the entry with the larger k
            tmp_fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npz.tmp")
            with os.fdopen(tmp_fd, "wb") as f:
                np.savez(
                    f,
                    ids=res.ids.astype(np.int32 if len(emb) < 2**31 else np.int64),
                    dists=res.dists,
                )
            os.replace(tmp, path)
        return res
    finally:
        if owner:
            lock.unlink(missing_ok=True)


def _cached_assign(emb: Embeddings, v: np.ndarray, cell_size: int, *, seed: int) -> np.ndarray:
    """Cells of a vocabulary (:func:`_two_level_cells`), cached on disk by the vocabulary's
    fingerprint for vocabularies of >= 20k rows (building them takes seconds)."""
    path = None
    if len(v) >= 20000:
        try:
            path = _cache_root() / "exact_cells" / f"v1-{emb.fingerprint()}-{cell_size}-{seed}.npy"
            if path.exists():
                a = np.load(path)
                if a.shape == (len(v),) and a.min() >= 0:
                    return a.astype(np.int64)
        except Exception:  # an unreadable cache only costs time
            path = None
    assign = _two_level_cells(v, cell_size, seed=seed)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy")
            with os.fdopen(fd, "wb") as f:
                np.save(f, assign.astype(np.int32))
            os.replace(tmp, path)
        except OSError:
            pass
    return assign


def _two_level_cells(v: np.ndarray, cell_size: int, *, seed: int) -> np.ndarray:
    """Cell id of every row: k-means into ``sqrt(n)`` coarse cells, then each coarse cell of ``m``
    rows split by k-means into ``ceil(m / cell_size)`` cells (cheap, and fine cells rarely
    straddle two natural clusters). Only the *speed* of the pruned exact search depends on the
    cells, never its answer."""
    n = v.shape[0]
    c1 = int(min(n, max(1, round(math.sqrt(n)))))
    top = _kmeans_assign(v, c1, seed=seed)
    out = np.empty(n, dtype=np.int64)
    nxt = 0
    order = np.argsort(top, kind="stable")
    bounds = np.searchsorted(top[order], np.arange(c1 + 1))
    for c in range(c1):
        rows = order[bounds[c] : bounds[c + 1]]
        if rows.size == 0:
            continue
        c2 = int(min(rows.size, -(-rows.size // cell_size)))
        sub = (
            _kmeans_assign(v[rows], c2, seed=seed + 1 + c, use_faiss=rows.size > 4096)
            if c2 > 1
            else np.zeros(rows.size, np.int64)
        )
        _, sub = np.unique(sub, return_inverse=True)  # drop empty sub-cells
        out[rows] = nxt + sub
        nxt += int(sub.max()) + 1
    return out


def _kmeans_assign(
    v: np.ndarray, C: int, *, seed: int, iters: int = 10, use_faiss: bool = True
) -> np.ndarray:
    """k-means cell of every row: faiss when installed, else Lloyd iterations from ``C`` random rows."""
    n = v.shape[0]
    if C >= n:
        return np.arange(n, dtype=np.int64)
    if C <= 1:
        return np.zeros(n, dtype=np.int64)
    try:
        if not use_faiss:  # small sets: numpy is faster than faiss's per-call overhead
            raise ImportError
        import faiss

        km = faiss.Kmeans(
            v.shape[1],
            C,
            niter=iters,
            seed=seed + 1,
            verbose=False,
            max_points_per_centroid=64,
            min_points_per_centroid=1,
        )
        km.train(np.ascontiguousarray(v, dtype=np.float32))
        _, a = km.index.search(np.ascontiguousarray(v, dtype=np.float32), 1)
        return a[:, 0].astype(np.int64)
    except ImportError:
        pass
    g = np.random.default_rng(seed)
    cent = v[g.choice(n, C, replace=False)].astype(np.float32)
    assign = np.zeros(n, dtype=np.int64)
    for it in range(iters + 1):
        cn = np.einsum("ij,ij->i", cent, cent)
        for s in range(0, n, 8192):
            S = v[s : s + 8192] @ (-2.0 * cent.T)
            S += cn
            assign[s : s + 8192] = S.argmin(axis=1)
        if it == iters:
            break
        cent = _cell_means(v, assign, C).astype(np.float32)
        empty = np.bincount(assign, minlength=C) == 0
        if empty.any():  # re-seed empty cells with random rows
            cent[empty] = v[g.choice(n, int(empty.sum()), replace=False)]
    return assign


def _cell_means(v: np.ndarray, assign: np.ndarray, C: int) -> np.ndarray:
    """float64 mean of the rows of each cell (zeros for an empty cell)."""
    order = np.argsort(assign, kind="stable")
    cnt = np.bincount(assign, minlength=C)
    starts = np.concatenate([[0], np.cumsum(cnt)])[:-1]
    out = np.zeros((C, v.shape[1]), dtype=np.float64)
    ne = cnt > 0
    out[ne] = np.add.reduceat(v[order], starts[ne], axis=0, dtype=np.float64) / cnt[ne][:, None]
    return out


class HnswIndex:
    """Approximate k-NN with hnswlib (``pip install 'privnlp[ann]'``), built once per vocabulary
    and parameter set from the public vectors (post-processing: the claim is unchanged).

    Args:
        embeddings: the public vocabulary vectors.
        ef: the hnswlib search breadth (``max(ef, k)`` at query time), an integer in [1, 100000];
            ``None`` (default): the smallest of :data:`EF_LADDER` whose top-k recall reaches
            ``recall_target`` on the first 2,000 queries of the first call.
        recall_target: the recall a calibrated ``ef`` must reach, in [0, 1].
        M: hnswlib graph degree.
        ef_construction: hnswlib build breadth.
        num_threads: threads used to build and query.
        seed: hnswlib's build seed.

    Raises:
        InvalidArgument: ``ef`` out of range.
        MissingDependency: hnswlib is not installed (on the first query).
    """

    def __init__(
        self,
        embeddings: Embeddings,
        ef: int | None = None,
        M: int = 16,
        ef_construction: int = 100,
        num_threads: int = 2,
        seed: int = 0,
        recall_target: float = RECALL_TARGET,
    ) -> None:
        if ef is not None:
            check_range("ef", ef, 1, 100000, integer=True)
        check_range("recall_target", recall_target, 0.0, 1.0)
        self.embeddings = embeddings
        self.ef = ef
        self.M = M
        self.ef_construction = ef_construction
        self.num_threads = num_threads
        self.seed = seed
        self.recall_target = recall_target

    def resolved_ef(self) -> int | None:
        """The ``ef`` in use: the given one, or the calibrated one (``None`` before the first query)."""
        return self.ef if self.ef is not None else self.__dict__.get("_ef_cal")

    def calibrate(
        self, probe: np.ndarray, k: int, exact: NeighborResult | None = None
    ) -> Calibration:
        """Set ``ef`` to the smallest of :data:`EF_LADDER` reaching ``recall_target`` on ``probe``."""
        cal = calibrate_param(
            lambda e: HnswIndex(
                self.embeddings, e, self.M, self.ef_construction, self.num_threads, self.seed
            ),
            "ef",
            EF_LADDER,
            probe,
            k,
            self.recall_target,
            exact=exact,
        )
        self.__dict__["_ef_cal"] = int(cal.value)
        return cal

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
            idx.init_index(
                max_elements=n,
                ef_construction=self.ef_construction,
                M=self.M,
                random_seed=self.seed,
            )
            idx.set_num_threads(self.num_threads)
            idx.add_items(self.embeddings.vectors, np.arange(n))
            cache[key] = idx
        return cache[key]

    def query(self, q: np.ndarray, k: int) -> NeighborResult:
        idx = self._index()
        q = np.ascontiguousarray(q, dtype=np.float32)
        if q.shape[0] == 0:
            return NeighborResult(np.empty((0, k), np.int64), np.empty((0, k), np.float64))
        if self.resolved_ef() is None:
            self.calibrate(q[np.linspace(0, q.shape[0] - 1, min(q.shape[0], 2000)).astype(int)], k)
        idx.set_ef(max(self.resolved_ef(), k))
        labels, _ = idx.knn_query(q, k=k, num_threads=self.num_threads)
        labels = labels.astype(np.int64)
        d = _exact_dists(self.embeddings, q, labels)
        if k > 1:
            order = np.argsort(d, axis=1, kind="stable")
            labels = np.take_along_axis(labels, order, axis=1)
            d = np.take_along_axis(d, order, axis=1)
        return NeighborResult(labels, d)


class FaissIndex:
    """Approximate k-NN on a faiss index (``pip install 'privnlp[ann]'``), built once per vocabulary
    and parameter set from the public vectors (post-processing: the claim is unchanged).

    ``factory`` is a faiss ``index_factory`` string; ``None`` (default) = ``"IVF{n // 200},Flat"``
    (about 200 vocabulary rows per inverted list, 250 lists for a 50k vocabulary). For an
    ``"IVF<nlist>,Flat"`` index the search is *batched*: faiss trains the k-means coarse quantizer
    and assigns the vocabulary to lists; a query batch is assigned to its ``nprobe`` nearest
    centroids by one float32 GEMM, the queries are grouped by list and each list is scanned with
    one GEMM against its rows (``num_threads`` Python threads over the lists, BLAS single-threaded).
    That is several times faster than faiss's per-query list scan when many noisy vectors are
    queried at once. Any other factory string (``"HNSW32,Flat"``, ``"IVF1024,PQ75x4fs,RFlat"``,
    ...) is searched by faiss itself, with ``k * k_factor`` candidates. Either way the returned
    candidates are re-ranked by float64 distance, so ``dists`` are exact for the ids returned;
    what is approximate is *which* ids (measure with :func:`topk_recall` on noisy vectors).

    ``nprobe`` (IVF) = lists scanned per query; ``None`` (default) = the smallest ``nprobe`` of
    :data:`NPROBE_LADDER` whose top-k recall reaches ``recall_target`` (0.99) on the first 2,000
    queries of the first call (measured against the exact index; post-processing of those noisy
    vectors). :class:`~privnlp.mechanisms.text.WordMetricDP` calibrates on a public probe instead
    (noisy vocabulary vectors at its epsilon) and passes the result. No default is below the target:
    ``nprobe=1`` had a top-2 recall of 0.50 on GloVe at epsilon = 10. ``ef_search`` (HNSW) = faiss
    ``efSearch``. The trained index is cached on disk (``cache_dir()/faiss``), keyed by the
    vectors' fingerprint, the factory string and the seed, so a second process loads it in about a
    second instead of training k-means again.
    """

    def __init__(
        self,
        embeddings: Embeddings,
        factory: str | None = None,
        nprobe: int | None = None,
        k_factor: int = 1,
        ef_search: int = 32,
        num_threads: int = 2,
        batched: bool = True,
        seed: int = 0,
        recall_target: float = RECALL_TARGET,
        disk_cache: bool = True,
    ) -> None:
        if nprobe is not None:
            check_range("nprobe", nprobe, 1, 1 << 20, integer=True)
        check_range("recall_target", recall_target, 0.0, 1.0)
        check_range("k_factor", k_factor, 1, 1 << 16, integer=True)
        check_range("ef_search", ef_search, 1, 1 << 20, integer=True)
        check_range("num_threads", num_threads, 1, 1024, integer=True)
        if factory is not None and not isinstance(factory, str):
            raise InvalidArgument(
                f"factory must be a faiss index_factory string or None; got {factory!r}"
            )
        self.embeddings = embeddings
        self.factory = factory
        self.nprobe = nprobe
        self.k_factor = k_factor
        self.ef_search = ef_search
        self.num_threads = num_threads
        self.batched = batched
        self.seed = seed
        self.recall_target = recall_target
        self.disk_cache = disk_cache

    def resolved_factory(self) -> str:
        if self.factory is not None:
            return self.factory
        return f"IVF{default_nlist(len(self.embeddings))},Flat"

    def resolved_nprobe(self) -> int | None:
        """The ``nprobe`` in use: the given one, or the calibrated one (``None`` before the first query)."""
        return self.nprobe if self.nprobe is not None else self.__dict__.get("_nprobe_cal")

    def _disk_path(self, fac: str) -> Path | None:
        if not self.disk_cache or len(self.embeddings) < 20000:
            return None
        safe = "".join(c if c.isalnum() else "_" for c in fac)
        return (
            _cache_root() / "faiss" / f"v1-{self.embeddings.fingerprint()}-{safe}-{self.seed}.faiss"
        )

    @staticmethod
    def _faiss() -> Any:
        try:
            import faiss
        except ImportError as e:  # pragma: no cover - depends on extras
            raise MissingDependency("faiss-cpu", "ann") from e
        return faiss

    #: version of the on-disk GEMM layout (:meth:`_layout_path`); bump when its contents change
    LAYOUT_VERSION = 1

    def _layout_path(self, path: Path) -> Path:
        return path.with_name(f"{path.stem}.gemm{self.LAYOUT_VERSION}")

    def _index(self) -> dict:
        fac = self.resolved_factory()
        key = ("faiss", fac, self.seed)
        cache = self.embeddings._cache
        if key in cache:
            return cache[key]
        path = self._disk_path(fac)
        if path is not None and self.batched:
            P = self._load_layout(path)
            if P is not None:  # the batched scan needs no faiss object (nor the faiss import)
                cache[key] = P
                return P
        idx = self._build_or_read(fac, path)
        P = self._layout(idx)
        if P["gemm"] and path is not None and self.batched:
            self._save_layout(path, P)
        cache[key] = P
        return P

    def _build_or_read(self, fac: str, path: Path | None) -> Any:
        faiss = self._faiss()
        faiss.omp_set_num_threads(self.num_threads)
        v = self.embeddings.vectors
        n, d = v.shape
        idx = None
        if path is not None and path.exists():
            try:
                idx = faiss.read_index(str(path))
                if idx.ntotal != n or idx.d != d:
                    idx = None
            except RuntimeError:  # an unreadable cache only costs time
                idx = None
        if idx is None:
            v = np.ascontiguousarray(v, dtype=np.float32)
            try:
                idx = faiss.index_factory(d, fac)
            except RuntimeError as e:
                raise InvalidArgument(
                    f"factory: faiss cannot build {fac!r}: {str(e).strip().splitlines()[-1]}"
                ) from e
            try:
                ivf0 = faiss.extract_index_ivf(idx)
            except RuntimeError:
                ivf0 = None
            if ivf0 is not None:
                if ivf0.nlist > n:
                    raise InvalidArgument(
                        f"factory: {ivf0.nlist} inverted lists for a vocabulary of {n} rows; use at most {n}"
                    )
                ivf0.cp.seed = self.seed
            if not idx.is_trained:
                idx.train(v)
            idx.add(v)
            if path is not None:
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".faiss")
                    os.close(fd)
                    faiss.write_index(idx, tmp)
                    os.replace(tmp, path)
                except (OSError, RuntimeError):
                    pass
        return idx

    def _layout(self, idx: Any) -> dict:
        """The faiss index and, for an L2 ``IVF...,Flat`` index, the arrays of the batched scan:
        ``order`` (vocabulary rows list by list), ``starts`` (list boundaries in ``order``), the
        coarse centroids as ``CT = -2 C^T`` and ``cn = |c|^2``, and per list one C-contiguous
        ``[-2 v^T ; |v|^2]`` block (``VTa``, views of one flat array ``flat``)."""
        faiss = self._faiss()
        v = self.embeddings.vectors
        d = v.shape[1]
        ivf = None
        try:
            ivf = faiss.extract_index_ivf(idx)
        except RuntimeError:
            pass
        P: dict = {"index": idx, "ivf": ivf, "gemm": False}
        if (
            ivf is not None
            and isinstance(faiss.downcast_index(idx), faiss.IndexIVFFlat)
            and ivf.metric_type == faiss.METRIC_L2
        ):
            nl = ivf.nlist
            C = ivf.quantizer.reconstruct_n(0, nl).astype(np.float32)
            # the lists as faiss holds them (no second assignment pass over the vocabulary)
            inv = ivf.invlists
            sizes = np.array([inv.list_size(j) for j in range(nl)], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)])
            order = np.empty(int(starts[-1]), dtype=np.int64)
            for j in range(nl):
                if sizes[j]:
                    order[starts[j] : starts[j + 1]] = faiss.rev_swig_ptr(
                        inv.get_ids(j), int(sizes[j])
                    )
            # list j's block [-2 v^T ; |v|^2] (d+1 x m_j) at flat[(d+1) starts[j] : (d+1) starts[j+1]]:
            # built list by list (a transpose that fits in cache; the whole-matrix transpose took
            # 0.3-0.7 s); one GEMM of [q, 1] with a block gives |v|^2 - 2 q.v
            flat = np.empty((d + 1) * len(order), dtype=np.float32)
            for j in range(nl):
                s, e = starts[j], starts[j + 1]
                vj = np.asarray(v[order[s:e]], dtype=np.float32)
                b = flat[(d + 1) * s : (d + 1) * e].reshape(d + 1, e - s)
                np.multiply(vj.T, -2.0, out=b[:d])
                np.einsum("ij,ij->i", vj, vj, out=b[d])
            self._finish_layout(P, C, order, starts, flat, d)
        return P

    @staticmethod
    def _finish_layout(
        P: dict, C: np.ndarray, order: np.ndarray, starts: np.ndarray, flat: np.ndarray, d: int
    ) -> None:
        nl = len(starts) - 1
        VTa = [
            flat[(d + 1) * starts[j] : (d + 1) * starts[j + 1]].reshape(d + 1, -1)
            for j in range(nl)
        ]
        P.update(
            gemm=True,
            nlist=nl,
            order=order,
            starts=starts,
            C=C,
            flat=flat,
            CT=np.ascontiguousarray(-2.0 * C.T),
            cn=np.einsum("ij,ij->i", C, C),
            vsq=np.concatenate([a[d] for a in VTa]) if VTa else np.zeros(0, np.float32),
            VTa=VTa,
            VT=[a[:d] for a in VTa],  # the -2 v^T of the general top-k scan (views)
        )

    def _save_layout(self, path: Path, P: dict) -> None:
        """Write the batched scan's arrays next to the faiss file (atomically: a temp file + rename,
        the small ``.npz`` last, so its presence means a complete pair), stamped with the faiss
        file's size and mtime: a rebuilt index file invalidates them."""
        try:
            st = path.stat()
            base = self._layout_path(path)
            tmp = base.with_name(f".{base.name}.{os.getpid()}.tmp.npy")
            np.save(tmp, P["flat"])
            os.replace(tmp, base.with_name(base.name + ".npy"))
            tmpz = base.with_name(f".{base.name}.{os.getpid()}.tmp.npz")
            with open(tmpz, "wb") as fh:
                np.savez(
                    fh,
                    C=P["C"],
                    order=P["order"],
                    starts=P["starts"],
                    stamp=np.array([st.st_size, st.st_mtime_ns], dtype=np.int64),
                )
            os.replace(tmpz, base.with_name(base.name + ".npz"))
        except OSError:  # a read-only cache only costs time
            pass

    def _load_layout(self, path: Path) -> dict | None:
        """The cached layout of :meth:`_save_layout` (the vector blocks memory-mapped), or ``None``
        when missing, stale (the faiss file changed) or inconsistent with these embeddings."""
        base = self._layout_path(path)
        n, d = self.embeddings.vectors.shape
        try:
            st = path.stat()
            with np.load(base.with_name(base.name + ".npz")) as z:
                C, order, starts, stamp = z["C"], z["order"], z["starts"], z["stamp"]
            # memory-mapped: no copy, and the pages are shared by the --num-proc workers
            flat = np.asarray(np.load(base.with_name(base.name + ".npy"), mmap_mode="r"))
        except (OSError, ValueError, KeyError):
            return None
        if (
            list(stamp) != [st.st_size, st.st_mtime_ns]
            or C.ndim != 2
            or C.shape[1] != d
            or len(starts) != C.shape[0] + 1
            or order.shape != (n,)
            or starts[0] != 0
            or starts[-1] != n
            or np.any(np.diff(starts) < 0)
            or flat.shape != ((d + 1) * n,)
            or flat.dtype != np.float32
        ):
            return None
        P: dict = {"index": None, "ivf": None, "gemm": False, "path": path}
        self._finish_layout(P, C, order, starts, flat, d)
        return P

    def _native(self, P: dict) -> tuple[Any, Any]:
        """The faiss index and its IVF part (read from disk when the layout came from the cache)."""
        if P["index"] is None:
            Q = self._layout(self._build_or_read(self.resolved_factory(), P["path"]))
            P["index"], P["ivf"] = Q["index"], Q["ivf"]
        return P["index"], P["ivf"]

    @staticmethod
    def _nlist(P: dict) -> int | None:
        if P.get("gemm"):
            return int(P["nlist"])
        return P["ivf"].nlist if P["ivf"] is not None else None

    def query(self, q: np.ndarray, k: int) -> NeighborResult:
        emb = self.embeddings
        n = len(emb)
        q = _check_queries(emb, q, k)
        if q.shape[0] == 0:
            return NeighborResult(np.empty((0, k), np.int64), np.empty((0, k), np.float64))
        P = self._index()
        if self.resolved_nprobe() is None:
            self.calibrate(q[np.linspace(0, q.shape[0] - 1, min(q.shape[0], 2000)).astype(int)], k)
        want = self.resolved_nprobe()
        nl = self._nlist(P)
        nprobe = min(want, nl) if nl is not None else want
        if P["gemm"] and self.batched:
            labels = self._batched_ivf(P, q, k, nprobe)
        else:
            faiss = self._faiss()
            faiss.omp_set_num_threads(self.num_threads)
            idx, ivf = self._native(P)
            if ivf is not None:
                ivf.nprobe = nprobe
            if hasattr(faiss.downcast_index(idx), "hnsw"):
                faiss.downcast_index(idx).hnsw.efSearch = max(self.ef_search, k * self.k_factor)
            kk = min(n, k * self.k_factor)
            _, labels = idx.search(q, kk)
            labels = labels.astype(np.int64)
        nt = max(1, min(self.num_threads, q.shape[0] // 512))
        if nt > 1:  # numpy releases the GIL in the gather / float64 maths
            parts = np.array_split(np.arange(q.shape[0]), nt)
            with ThreadPoolExecutor(nt) as pool:
                rs = list(pool.map(lambda r: _rerank(emb, q[r], labels[r], k), parts))
            res = NeighborResult(
                np.concatenate([r.ids for r in rs]), np.concatenate([r.dists for r in rs])
            )
        else:
            res = _rerank(emb, q, labels, k)
        short = (labels < 0).sum(axis=1) > labels.shape[1] - k  # fewer than k candidates found
        if short.any():  # rare (tiny inverted lists): answer those queries exactly
            ex = ExactIndex(emb).query(q[short], k)
            res.ids[short], res.dists[short] = ex.ids, ex.dists
        return res

    def calibrate(
        self, probe: np.ndarray, k: int, exact: NeighborResult | None = None
    ) -> Calibration:
        """Set ``nprobe`` to the smallest of :data:`NPROBE_LADDER` whose top-``k`` recall on ``probe``
        reaches ``recall_target`` (the largest ladder step <= nlist if none does: the full scan)."""
        P = self._index()
        nl = self._nlist(P) or 1
        ladder = [p for p in NPROBE_LADDER if p < nl] + [nl]
        cal = calibrate_param(
            lambda p: FaissIndex(
                self.embeddings,
                self.factory,
                p,
                self.k_factor,
                self.ef_search,
                self.num_threads,
                self.batched,
                self.seed,
                disk_cache=self.disk_cache,
            ),
            "nprobe",
            ladder,
            probe,
            k,
            self.recall_target,
            exact=exact,
        )
        self.__dict__["_nprobe_cal"] = int(cal.value)
        return cal

    #: k = 2: the two-pass scan of :meth:`_ivf_top2` (False: the general per-list top-k scan, the
    #: default before; same candidates, kept for benchmarks/sanitize_throughput.py's ratio)
    top2_scan = True

    def _batched_ivf(self, P: dict, q: np.ndarray, k: int, nprobe: int) -> np.ndarray:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn

            def threadpool_limits(limits: int) -> Any:
                return _nc()

        B, nl, starts, VT, vsq = q.shape[0], P["nlist"], P["starts"], P["VT"], P["vsq"]
        nt = max(1, min(self.num_threads, B))
        cd = np.full((B * nprobe, k), np.inf, dtype=np.float32)
        ci = np.full((B * nprobe, k), -1, dtype=np.int64)

        def coarse(rows: np.ndarray) -> np.ndarray:
            S = q[rows] @ P["CT"]
            S += P["cn"]
            if nprobe == 1:
                return S.argmin(axis=1)[:, None]
            return np.argpartition(S, nprobe - 1, axis=1)[:, :nprobe]

        if k == 2 and self.top2_scan:  # Vickrey's two candidates: one argmin pass per list
            with threadpool_limits(limits=1), ThreadPoolExecutor(nt) as pool:
                A = np.concatenate(list(pool.map(coarse, np.array_split(np.arange(B), nt))))
                ci2 = self._ivf_top2(P, q, A, pool, nt)
            return np.where(ci2 >= 0, P["order"][ci2.clip(0)], -1)
        with threadpool_limits(limits=1), ThreadPoolExecutor(nt) as pool:
            A = np.concatenate(list(pool.map(coarse, np.array_split(np.arange(B), nt))))
            flat = A.ravel()
            # group (query, list) pairs by list: a stable radix sort on 16-bit list ids (O(n))
            qo = np.argsort(flat.astype(np.int16) if nl <= 32767 else flat, kind="stable")
            qs = np.searchsorted(flat[qo], np.arange(nl + 1))
            qrow = qo // nprobe

            def scan(lists: range) -> None:
                for j in lists:
                    s, e = qs[j], qs[j + 1]
                    m = starts[j + 1] - starts[j]
                    if s == e or m == 0:
                        continue
                    D = q[qrow[s:e]] @ VT[j]
                    D += vsq[starts[j] : starts[j + 1]]
                    dst = qo[s:e]
                    kk = min(k, m)
                    r = np.arange(e - s)
                    if kk <= 2:
                        i1 = D.argmin(axis=1)
                        cd[dst, 0] = D[r, i1]
                        ci[dst, 0] = i1 + starts[j]
                        if kk == 2:
                            D[r, i1] = np.inf
                            i2 = D.argmin(axis=1)
                            cd[dst, 1] = D[r, i2]
                            ci[dst, 1] = i2 + starts[j]
                    else:
                        part = (
                            np.argpartition(D, kk - 1, axis=1)[:, :kk]
                            if kk < m
                            else np.broadcast_to(np.arange(m), D.shape)
                        )
                        cd[dst, :kk] = np.take_along_axis(D, part, axis=1)
                        ci[dst, :kk] = part + starts[j]

            list(pool.map(scan, [range(t, nl, nt) for t in range(nt)]))
        cd = cd.reshape(B, nprobe * k)
        ci = ci.reshape(B, nprobe * k)
        if nprobe > 1:  # the k best of the nprobe * k candidates (the exact re-rank orders them)
            sel = np.argpartition(cd, k - 1, axis=1)[:, :k] if cd.shape[1] > k else None
            if sel is not None:
                ci = np.take_along_axis(ci, sel, axis=1)
        return np.where(ci >= 0, P["order"][ci.clip(0)], -1)

    @staticmethod
    def _ivf_top2(P: dict, q: np.ndarray, A: np.ndarray, pool: Any, nt: int) -> np.ndarray:
        """The two nearest rows (positions in the list-sorted order, ``-1`` = none) of each query
        among the rows of its probed lists ``A`` (B x nprobe), exactly as a top-2 over all those rows:
        pass 1 keeps each (query, list) pair's nearest row only (one GEMM with the squared norms
        folded in + one argmin); the overall nearest is the best of these, and the second is either
        the nearest of another list or the second of the nearest's own list, which pass 2 finds by
        scanning that one list again (1/nprobe of the work).

        The per-list loop makes four numpy calls, each into a per-thread buffer or a slice of the
        pairs' list-sorted results (no temporaries, no fancy-index scatter per list: one scatter per
        batch), so the two threads spend less time holding the GIL between their GEMMs."""
        B, nprobe = A.shape
        nl, starts, VTa = P["nlist"], P["starts"], P["VTa"]
        d1 = q.shape[1] + 1
        qa = np.empty((B, d1), dtype=np.float32)
        qa[:, :-1] = q
        qa[:, -1] = 1.0
        flat = A.ravel()
        # group (query, list) pairs by list: a stable radix sort on 16-bit list ids (O(n))
        qo = np.argsort(flat.astype(np.int16) if nl <= 32767 else flat, kind="stable")
        qs = np.searchsorted(flat[qo], np.arange(nl + 1))
        qrow = qo // nprobe
        sizes = np.diff(starts)
        nq = np.diff(qs)
        # results of the pairs in list-sorted order (pair qo[i] at i): distance and row in its list
        cd_s = np.empty(B * nprobe, dtype=np.float32)
        ci_s = np.empty(B * nprobe, dtype=np.int64)
        qs_l, sz_l = qs.tolist(), sizes.tolist()
        big = int((nq * sizes).max()) if nl else 0
        maxq = int(nq.max()) if nl else 0

        def scan(lists: range) -> None:
            Qb = np.empty((maxq, d1), dtype=np.float32)
            Db = np.empty(big, dtype=np.float32)
            ar = np.arange(maxq)
            for j in lists:
                s, e = qs_l[j], qs_l[j + 1]
                m = sz_l[j]
                if s == e or m == 0:
                    continue
                Q = Qb[: e - s]
                np.take(qa, qrow[s:e], axis=0, out=Q)
                D = Db[: (e - s) * m].reshape(e - s, m)
                np.matmul(Q, VTa[j], out=D)
                i1 = D.argmin(axis=1, out=ci_s[s:e])
                cd_s[s:e] = D[ar[: e - s], i1]

        list(pool.map(scan, [range(t, nl, nt) for t in range(nt)]))
        ci_s += np.repeat(starts[:-1], nq)
        gone = np.repeat(sizes == 0, nq)  # pairs of empty lists: no candidate
        cd_s[gone] = np.inf
        ci_s[gone] = -1
        cd = np.empty(B * nprobe, dtype=np.float32)
        ci = np.empty(B * nprobe, dtype=np.int64)
        cd[qo] = cd_s
        ci[qo] = ci_s
        cd = cd.reshape(B, nprobe)
        ci = ci.reshape(B, nprobe)
        r = np.arange(B)
        b = cd.argmin(axis=1)
        first = ci[r, b]
        cd[r, b] = np.inf
        c2 = cd.argmin(axis=1)
        other_d, other_i = cd[r, c2], ci[r, c2]
        # pass 2: the second nearest row inside each query's best list
        own_d = np.full(B, np.inf, dtype=np.float32)
        own_i = np.full(B, -1, dtype=np.int64)
        ok = first >= 0
        bl = np.where(ok, A[r, b], nl)  # queries without any candidate go to a sentinel list
        o = np.argsort(bl, kind="stable")
        bs = np.searchsorted(bl[o], np.arange(nl + 1))

        def own(lists: range) -> None:
            for j in lists:
                s, e = bs[j], bs[j + 1]
                if s == e or starts[j + 1] - starts[j] < 2:
                    continue
                rows = o[s:e]
                D = qa[rows] @ VTa[j]
                rr = np.arange(e - s)
                D[rr, first[rows] - starts[j]] = np.inf
                i2 = D.argmin(axis=1)
                own_d[rows] = D[rr, i2]
                own_i[rows] = i2 + starts[j]

        list(pool.map(own, [range(t, nl, nt) for t in range(nt)]))
        second = np.where(other_d < own_d, other_i, own_i)
        second = np.where(np.minimum(other_d, own_d) < np.inf, second, -1)
        return np.stack([first, second], axis=1)


def _rerank(emb: Embeddings, q: np.ndarray, labels: np.ndarray, k: int) -> NeighborResult:
    """The first ``k`` of the candidate ids (``-1`` = none) by float64 distance, ties -> lower id;
    duplicate candidates are counted once."""
    lab = np.where(labels < 0, 0, labels)
    d = _exact_dists(emb, q, lab)
    d[labels < 0] = np.inf
    if labels.shape[1] > 1:
        srt_o = np.argsort(lab, axis=1, kind="stable")
        srt = np.take_along_axis(lab, srt_o, axis=1)
        dup_sorted = np.zeros(srt.shape, dtype=bool)
        dup_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
        if dup_sorted.any():
            dup = np.empty_like(dup_sorted)
            np.put_along_axis(dup, srt_o, dup_sorted, axis=1)
            d[dup] = np.inf
        order = np.lexsort((lab, d), axis=-1)[:, :k]
        lab = np.take_along_axis(lab, order, axis=1)
        d = np.take_along_axis(d, order, axis=1)
    return NeighborResult(np.ascontiguousarray(lab[:, :k]), np.ascontiguousarray(d[:, :k]))


@dataclass(frozen=True)
class Calibration:
    """The parameter an approximate index was calibrated to, and the recall it reached.

    Attributes:
        param: the parameter's name (``"nprobe"``, ``"ef"``).
        value: its chosen value.
        recall: top-k recall on the probe (against the exact index).
        recall_lower: the 95% Wilson lower bound of that recall (probe ids as Bernoulli trials).
        probe_queries: the number of probe queries.
        k: the top-k measured.
        target: the recall the choice had to reach.
        tried: ``(value, recall)`` of every step tried.
    """

    param: str
    value: int
    recall: float
    recall_lower: float
    probe_queries: int
    k: int
    target: float
    tried: tuple[tuple[int, float], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "param": self.param,
            "value": int(self.value),
            "recall": float(self.recall),
            "recall_lower95": float(self.recall_lower),
            "probe_queries": int(self.probe_queries),
            "k": int(self.k),
            "target": float(self.target),
            "tried": [[int(a), float(b)] for a, b in self.tried],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        return cls(
            d["param"],
            int(d["value"]),
            float(d["recall"]),
            float(d["recall_lower95"]),
            int(d["probe_queries"]),
            int(d["k"]),
            float(d["target"]),
            tuple((int(a), float(b)) for a, b in d.get("tried", ())),
        )


def wilson_lower(hits: int, n: int, z: float = 1.96) -> float:
    """95% Wilson score lower bound of a proportion ``hits / n``."""
    if n <= 0:
        return 0.0
    p = hits / n
    den = 1.0 + z * z / n
    c = p + z * z / (2 * n)
    r = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (c - r) / den)


def default_nlist(n: int) -> int:
    """Inverted lists of the default IVF index: the power of two nearest ``1.6 sqrt(n)`` (1,024 for
    GloVe's 391,823 words, where IVF1024 at its calibrated nprobe measured the best speed at 0.99
    recall), at most ``n // 39`` (faiss wants >= 39 training points per list)."""
    target = 1.6 * math.sqrt(max(n, 1))
    nl = 2 ** max(0, round(math.log2(max(target, 1.0))))
    return int(max(1, min(nl, n // 39)))


def calibrate_param(
    make: Any,
    param: str,
    ladder: Any,
    probe: np.ndarray,
    k: int,
    target: float,
    *,
    exact: NeighborResult | None = None,
) -> Calibration:
    """The first ``value`` of ``ladder`` whose index ``make(value)`` reaches top-``k`` recall
    ``target`` on ``probe`` (the last step if none does)."""
    if exact is None:
        exact = ExactIndex(make(ladder[0]).embeddings).query(probe, k)
    tried = []
    n = exact.ids.size
    for v in ladder:
        r = topk_recall(make(v).query(probe, k), exact)
        tried.append((int(v), r))
        if r >= target:
            break
    v, r = tried[-1]
    return Calibration(
        param, v, r, wilson_lower(round(r * n), n), probe.shape[0], k, target, tuple(tried)
    )


@contextmanager
def ieee_fp32_matmul() -> Iterator[None]:
    """float32 GEMMs in IEEE float32 inside (``torch.set_float32_matmul_precision("highest")``, restored
    after): a process that allowed TF32 / bf16 GEMMs (``"high"`` / ``"medium"``, common in training
    scripts) would round the prescreen's inputs to 10 or 7 mantissa bits, far outside the float32
    rounding bound its certificate assumes."""
    import torch

    prev = torch.get_float32_matmul_precision()
    if prev == "highest":
        yield
        return
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(prev)


class TorchIndex:
    """Exact Euclidean k-NN in torch on a device (``"cuda"``; ``"cpu"`` for tests), with the answer of
    :class:`ExactIndex` (same ids, same float64 distances, ties -> lower id).

    1. Prescreen on the device: ``s~_j = ||e_j||^2 - 2 q.e_j`` (float32 GEMM, blocks of
       ``block`` queries), the ``k + margin`` smallest per query (``torch.topk``).
    2. The candidates' distances in float64 from difference vectors (the definition the CPU search
       uses), ordered by (distance, id).
    3. Certificate: every row outside the candidates has ``s~ >= s~_(k+margin)``; with the rigorous
       float32 rounding bound ``m`` of the prescreen (``|s~ - s| <= m``, the ``gamma_d`` bound doubled),
       if ``s~_(k+margin) - m`` exceeds the k-th candidate's exact score, no outside row can reach
       or tie the top k. Queries without the certificate (rare: near-ties at the margin) are answered
       by :class:`ExactIndex` on the CPU.

    Args:
        embeddings: the public vocabulary vectors.
        device: a torch device string (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        block: queries per device block, an integer in [1, 2**20].
        margin: extra prescreen candidates per query, an integer in [1, 4096].
    """

    def __init__(
        self, embeddings: Embeddings, device: str = "cuda", block: int = 8192, margin: int = 8
    ) -> None:
        check_range("block", block, 1, 1 << 20, integer=True)
        check_range("margin", margin, 1, 4096, integer=True)
        self.embeddings = embeddings
        self.device = device
        self.block = block
        self.margin = margin

    def _prep(self) -> dict:
        key = ("torch_exact", str(self.device))
        cache = self.embeddings._cache
        if key not in cache:
            import torch  # heavy: only for the device path

            v = np.ascontiguousarray(self.embeddings.vectors, dtype=np.float32)
            E = torch.from_numpy(np.require(v, requirements=["W"])).to(self.device)
            en = torch.from_numpy(np.einsum("ij,ij->i", v, v, dtype=np.float32)).to(self.device)
            v64 = v.astype(np.float64)
            e2 = np.einsum("ij,ij->i", v64, v64)
            cache[key] = {
                "E": E,
                "en": en,
                "max_e2": float(e2.max()),
                "max_e": float(np.sqrt(e2.max())),
            }
        return cache[key]

    def query(self, q: Any, k: int) -> NeighborResult:
        import torch

        emb = self.embeddings
        if isinstance(q, torch.Tensor):
            q = q.detach().to("cpu", torch.float32).numpy()
        q = _check_queries(emb, q, k)
        B, d = q.shape
        n = len(emb)
        ids = np.empty((B, k), dtype=np.int64)
        dists = np.empty((B, k), dtype=np.float64)
        if B == 0:
            return NeighborResult(ids, dists)
        P = self._prep()
        kk = min(n, k + int(self.margin))
        q64 = q.astype(np.float64)
        qn = np.sqrt(np.einsum("ij,ij->i", q64, q64))
        # |s~ - s| <= 2 (d + 4) u32 (max ||e||^2 + 2 ||q|| max ||e||): GEMM and norm roundings, doubled
        m = 2.0 * (d + 4) * _U32 * (P["max_e2"] + 2.0 * qn * P["max_e"]) * 2.0 + 1e-30
        bad = np.zeros(B, dtype=bool)

        def rerank(s: int, sv: np.ndarray, cand: np.ndarray) -> None:
            # the CPU part (float64 distances of the candidates, order, certificate), run on a thread
            # pool while the device computes the next block (numpy releases the GIL in the gathers)
            b = cand.shape[0]
            qi = np.repeat(np.arange(s, s + b), kk)
            d2 = _pair_sq_dists(emb.vectors, cand.ravel(), q64, qi).reshape(b, kk)
            order = np.lexsort((cand, d2), axis=-1)
            cand = np.take_along_axis(cand, order, axis=1)
            d2 = np.take_along_axis(d2, order, axis=1)
            ids[s : s + b] = cand[:, :k]
            dists[s : s + b] = np.sqrt(d2[:, :k])
            if kk < n:  # certificate: the k-th exact score (s = d2 - ||q||^2) vs the excluded rows
                sk = d2[:, k - 1] - qn[s : s + b] ** 2
                bad[s : s + b] = ~(sv[:, -1] - m[s : s + b] > sk + m[s : s + b])

        bs = int(self.block)
        with ThreadPoolExecutor(max(1, min(8, (os.cpu_count() or 2) - 1))) as pool:
            jobs = []
            for s in range(0, B, bs):
                qb = torch.from_numpy(q[s : s + bs]).to(self.device)
                with ieee_fp32_matmul():
                    S = torch.addmm(P["en"][None, :], qb, P["E"].T, beta=1.0, alpha=-2.0)
                sv, si = torch.topk(S, kk, dim=1, largest=False, sorted=True)
                del (
                    S
                )  # before the next block's addmm: one block x vocabulary score matrix at a time
                sv = sv.to("cpu", torch.float64).numpy()
                cand = si.to("cpu").numpy().astype(np.int64)
                jobs.append(pool.submit(rerank, s, sv, cand))
            for j in jobs:
                j.result()
        if bad.any():
            r = ExactIndex(emb).query(q[bad], k)
            ids[bad], dists[bad] = r.ids, r.dists
        self.__dict__["_last_uncertified"] = int(bad.sum())
        return NeighborResult(ids, dists)

    def search_device(self, q: Any, k: int) -> tuple[Any, Any, Any]:
        """The exact top ``k`` of device queries without leaving the device (issue #31 item 3): the
        prescreen of :meth:`query`, then the candidates' float64 distances from difference vectors
        and their (distance, id) order on the device too.

        Args:
            q: a ``(B, d)`` float32 tensor on this index's device.
            k: neighbours per query, an integer in [1, vocabulary size].

        Returns:
            ``(ids, d2, bad)`` tensors on the device: ``(B, k)`` int64 ids, their ``(B, k)`` float64 squared
            distances, and a ``(B,)`` bool mask of the queries whose answer is not certified equal to
            :class:`ExactIndex`'s: the prescreen certificate of :meth:`query` failed, or two of the first
            ``k + 1`` float64 distances are within the rounding of the summation (a different summation
            order, the CPU's, could order them otherwise; exact ties too). The caller answers those
            rows with :class:`ExactIndex`. ``bad`` is empty of ``True`` on nearly every input."""
        import torch

        n = len(self.embeddings)
        check_range("k", k, 1, n, integer=True)
        B, d = q.shape
        P = self._prep()
        if "E64" not in P:  # the float64 copy only for this path (160 MB for GloVe-400k x 50)
            P["E64"] = P["E"].to(torch.float64)
        kk = min(n, k + int(self.margin))
        with ieee_fp32_matmul():
            S = torch.addmm(P["en"][None, :], q, P["E"].T, beta=1.0, alpha=-2.0)
        sv, si = torch.topk(S, kk, dim=1, largest=False, sorted=True)
        del S
        q64 = q.to(torch.float64)
        diff = P["E64"][si] - q64[:, None, :]
        d2 = (diff * diff).sum(-1)
        del diff
        # (distance, id) order: by id first, then a stable sort by distance (ties -> lower id)
        si, o = torch.sort(si, dim=1)
        d2 = d2.gather(1, o)
        d2, o = torch.sort(d2, dim=1, stable=True)
        si = si.gather(1, o)
        qn2 = (q64 * q64).sum(1)
        bad = torch.zeros(B, dtype=torch.bool, device=q.device)
        if (
            kk < n
        ):  # the prescreen certificate of query(): no row outside the candidates reaches the top k
            m = 2.0 * (d + 4) * _U32 * (P["max_e2"] + 2.0 * qn2.sqrt() * P["max_e"]) * 2.0 + 1e-30
            bad |= ~(sv[:, -1].to(torch.float64) - m > d2[:, k - 1] - qn2 + m)
        bad |= ~torch.isfinite(q).all(dim=1)  # the CPU index refuses them (InvalidArgument)
        top = d2[:, : min(kk, k + 1)]
        if top.shape[1] > 1:  # float64 sums of d squares in another order differ by <= ~d ulps
            tol = 4.0 * (d + 2) * 2.0**-53
            bad |= ((top[:, 1:] - top[:, :-1]) <= tol * top[:, 1:]).any(1)
        return si[:, :k], d2[:, :k], bad


def make_index(embeddings: Embeddings, index: str = "exact", **kw: Any) -> Any:
    if index == "exact":
        return ExactIndex(embeddings)
    if index == "torch":
        return TorchIndex(embeddings, **kw)
    if index == "hnsw":
        return HnswIndex(embeddings, **kw)
    if index == "faiss":
        return FaissIndex(embeddings, **kw)
    raise InvalidArgument(f"index must be 'exact', 'hnsw' or 'faiss'; got {index!r}")


def topk_recall(approx: NeighborResult, exact: NeighborResult) -> float:
    """Fraction of the exact top-k ids found in the approximate top-k (set recall per query).

    Args:
        approx: the approximate result.
        exact: the exact result for the same queries and k.

    Returns:
        The recall in [0, 1].
    """
    k = exact.ids.shape[1]
    hit = (approx.ids[:, :, None] == exact.ids[:, None, :]).any(axis=1)
    return float(hit.sum() / (exact.ids.shape[0] * k))
