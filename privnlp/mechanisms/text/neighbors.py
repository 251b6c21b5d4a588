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

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, MissingDependency, check_range

from .embeddings import Embeddings

__all__ = ["NeighborResult", "ExactIndex", "HnswIndex", "FaissIndex", "make_index", "topk_recall"]


@dataclass(frozen=True)
class NeighborResult:
    """``ids[i, r]`` = the (r+1)-th nearest vocabulary row of query i; ``dists`` = Euclidean distances."""

    ids: np.ndarray
    dists: np.ndarray


def _exact_dists(emb: Embeddings, q: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Euclidean distances recomputed in float64 for the selected rows (cheap: B x k x d)."""
    out = np.empty(ids.shape, dtype=np.float64)
    step = 1024   # chunked: a (B, k, d) float64 temporary for a large batch is slower than the maths
    for s in range(0, ids.shape[0], step):
        diff = emb.vectors[ids[s:s + step]].astype(np.float64) - q[s:s + step].astype(np.float64)[:, None, :]
        out[s:s + step] = np.einsum("bkd,bkd->bk", diff, diff)
    return np.sqrt(out)


_U32 = 2.0 ** -24   # unit roundoff of float32
_U16 = 2.0 ** -8    # unit roundoff of bfloat16 (8-bit significand)


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

        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
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

    ``precision="auto"`` uses bf16 when oneDNN supports it on this CPU, else fp32.
    """

    def __init__(self, embeddings: Embeddings, block_bytes: int = 48 << 20, precision: str = "auto",
                 group: int = 64) -> None:
        if precision not in ("auto", "bf16", "fp32"):
            raise InvalidArgument(f"precision must be 'auto', 'bf16' or 'fp32'; got {precision!r}")
        check_range("group", group, 2, 1 << 20, integer=True)
        self.embeddings = embeddings
        self.block_bytes = block_bytes
        self.precision = precision
        self.group = group

    def resolved_precision(self) -> str:
        if self.precision == "auto":
            return "bf16" if _bf16_ok() else "fp32"
        return self.precision

    def _prep(self) -> dict:
        prec = self.resolved_precision()
        key = ("exact_prescreen", prec, int(self.group))
        cache = self.embeddings._cache
        if key in cache:
            return cache[key]
        import torch

        v = self.embeddings.vectors
        n, d = v.shape
        v64 = v.astype(np.float64)
        half_sq = 0.5 * np.einsum("ij,ij->i", v64, v64)
        G = int(self.group)
        W = -(-n // G)
        n_pad = W * G
        K = d + 6
        if prec == "bf16":
            K = -(-K // 32) * 32                   # AMX tile width
            vt = torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)).bfloat16()
            vr = vt.float().numpy().astype(np.float64)       # e~ exactly
        else:
            vr = v64
        sq_parts = _split3_bf16(half_sq) if prec == "bf16" else _split3_f32(half_sq)
        A = np.zeros((n_pad, K), dtype=np.float32)
        A[:n, :d] = -vr
        A[:n, d:d + 3] = sq_parts
        A[:n, d + 3:d + 6] = 1.0
        A[n:, d] = 2.0 ** 100                      # padding rows: a huge score, never a candidate
        stats = {
            "max_e": float(np.sqrt(np.einsum("ij,ij->i", v64, v64).max())),
            "max_r": float(np.sqrt(((v64 - vr) ** 2).sum(axis=1).max())),
            "max_et": float(np.sqrt((vr ** 2).sum(axis=1).max())),
            "max_hsq": float(half_sq.max()),
            "max_sq_res": float(np.abs(half_sq - sq_parts.sum(axis=1)).max()),
        }
        if prec == "bf16":
            AT = torch.from_numpy(A).bfloat16().T.contiguous()     # exact: A holds bf16 values
        else:
            AT = torch.from_numpy(np.ascontiguousarray(A.T))
        cache[key] = {"prec": prec, "AT": AT, "n": n, "d": d, "K": K, "W": W, "G": G, **stats}
        return cache[key]

    def query(self, q: np.ndarray, k: int) -> NeighborResult:
        emb = self.embeddings
        n = len(emb)
        check_range("k", k, 1, math.inf, integer=True)
        if k > n:
            raise InvalidArgument(f"k must be <= the vocabulary size {n}; got {k}")
        q = np.ascontiguousarray(q, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != emb.dim:
            raise InvalidArgument(f"queries must have shape (B, {emb.dim}); got {q.shape}")
        if not np.isfinite(q).all():
            raise InvalidArgument("queries must be finite")
        B = q.shape[0]
        ids = np.empty((B, k), dtype=np.int64)
        dists = np.empty((B, k), dtype=np.float64)
        if B == 0:
            return NeighborResult(ids, dists)
        P = self._prep()
        bytes_per_q = P["W"] * P["G"] * (2 if P["prec"] == "bf16" else 4)
        block = max(1, min(B, int(self.block_bytes) // bytes_per_q))
        for s in range(0, B, block):
            i, dd = self._query_block(P, q[s:s + block], k)
            ids[s:s + block] = i
            dists[s:s + block] = dd
        return NeighborResult(ids, dists)

    def _query_block(self, P: dict, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import torch

        d, K, W, G, n = P["d"], P["K"], P["W"], P["G"], P["n"]
        b = q.shape[0]
        q64 = q.astype(np.float64)
        hq = 0.5 * np.einsum("ij,ij->i", q64, q64)
        if P["prec"] == "bf16":
            qt = torch.from_numpy(q).bfloat16()
            qr = qt.float().numpy().astype(np.float64)
            u_out = _U16
        else:
            qr = q64
            u_out = _U32
        # rigorous bound on |exact sum of the augmented products - ||q - e_j||^2 / 2|
        nq_err = np.sqrt(((q64 - qr) ** 2).sum(axis=1))
        nqr = np.sqrt((qr ** 2).sum(axis=1))
        m0 = (nq_err * P["max_e"] + nqr * P["max_r"] + P["max_sq_res"]
              + 2.0 * K * _U32 * (nqr * P["max_et"] + 2.0 * (hq + P["max_hsq"]) + 3.0))
        # offset c > bound: every computed score is > 0, so float order == integer order of the bits
        c = 4.0 * m0 + 1e-20
        hc = hq + c
        h_parts = _split3_bf16(hc) if P["prec"] == "bf16" else _split3_f32(hc)
        m = (m0 + np.abs(hc - h_parts.sum(axis=1)) + 4.0 * K * _U32 * c) * (1.0 + 1e-6) + 1e-30
        X = np.zeros((b, K), dtype=np.float32)
        X[:, :d] = qr
        X[:, d:d + 3] = 1.0
        X[:, d + 3:d + 6] = h_parts
        Xt = torch.from_numpy(X)
        if P["prec"] == "bf16":
            Xt = Xt.bfloat16()
        S = torch.mm(Xt, P["AT"])                   # (b, W*G) prescreen scores s~_j + c > 0
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
        thr = np.nextafter(thr.astype(np.float32), np.float32(np.inf))   # round up: stay conservative
        cq, cc = np.nonzero(gmin <= thr[:, None])                         # candidate (query, group)
        if P["prec"] == "bf16":   # gather the groups' raw bf16 bits and widen them exactly to fp32
            vals = (Sn[cq, :, cc].view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            vals = Sn[cq, :, cc]
        pi, gi = np.nonzero(vals <= thr[cq][:, None])
        pq = cq[pi]
        pj = cc[pi] + W * gi
        # exact float64 re-rank of the candidates
        ev = self.embeddings.vectors
        d2 = np.empty(pq.size, dtype=np.float64)
        step = 1 << 14
        for a in range(0, pq.size, step):
            diff = ev[pj[a:a + step]].astype(np.float64) - q64[pq[a:a + step]]
            d2[a:a + step] = np.einsum("ij,ij->i", diff, diff)
        order = np.lexsort((pj, d2, pq))
        pq, pj, d2 = pq[order], pj[order], d2[order]
        start = np.searchsorted(pq, np.arange(b))
        counts = np.diff(np.append(start, pq.size))
        if (counts < k).any():  # cannot happen (the k rows with the smallest s~ are candidates)
            raise RuntimeError("exact prescreen lost candidates; please report")
        sel = start[:, None] + np.arange(k)[None, :]
        return pj[sel], np.sqrt(d2[sel])


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

    ``nprobe`` (IVF) = lists scanned per query; ``ef_search`` (HNSW) = faiss ``efSearch``.
    """

    def __init__(self, embeddings: Embeddings, factory: str | None = None, nprobe: int = 1,
                 k_factor: int = 1, ef_search: int = 32, num_threads: int = 2, batched: bool = True,
                 seed: int = 0) -> None:
        check_range("nprobe", nprobe, 1, 1 << 20, integer=True)
        check_range("k_factor", k_factor, 1, 1 << 16, integer=True)
        check_range("ef_search", ef_search, 1, 1 << 20, integer=True)
        check_range("num_threads", num_threads, 1, 1024, integer=True)
        if factory is not None and not isinstance(factory, str):
            raise InvalidArgument(f"factory must be a faiss index_factory string or None; got {factory!r}")
        self.embeddings = embeddings
        self.factory = factory
        self.nprobe = nprobe
        self.k_factor = k_factor
        self.ef_search = ef_search
        self.num_threads = num_threads
        self.batched = batched
        self.seed = seed

    def resolved_factory(self) -> str:
        if self.factory is not None:
            return self.factory
        return f"IVF{max(1, len(self.embeddings) // 200)},Flat"

    @staticmethod
    def _faiss() -> Any:
        try:
            import faiss
        except ImportError as e:  # pragma: no cover - depends on extras
            raise MissingDependency("faiss-cpu", "ann") from e
        return faiss

    def _index(self) -> dict:
        fac = self.resolved_factory()
        key = ("faiss", fac, self.seed)
        cache = self.embeddings._cache
        if key in cache:
            return cache[key]
        faiss = self._faiss()
        faiss.omp_set_num_threads(self.num_threads)
        v = np.ascontiguousarray(self.embeddings.vectors, dtype=np.float32)
        n, d = v.shape
        try:
            idx = faiss.index_factory(d, fac)
        except RuntimeError as e:
            raise InvalidArgument(f"factory: faiss cannot build {fac!r}: {str(e).strip().splitlines()[-1]}") from e
        ivf = None
        try:
            ivf = faiss.extract_index_ivf(idx)
        except RuntimeError:
            pass
        if ivf is not None:
            if ivf.nlist > n:
                raise InvalidArgument(f"factory: {ivf.nlist} inverted lists for a vocabulary of {n} rows; use at most {n}")
            ivf.cp.seed = self.seed
        if not idx.is_trained:
            idx.train(v)
        idx.add(v)
        P: dict = {"index": idx, "ivf": ivf, "gemm": False}
        if (ivf is not None and isinstance(faiss.downcast_index(idx), faiss.IndexIVFFlat)
                and ivf.metric_type == faiss.METRIC_L2):
            nl = ivf.nlist
            C = ivf.quantizer.reconstruct_n(0, nl).astype(np.float32)
            _, a = ivf.quantizer.search(v, 1)
            a = a[:, 0]
            order = np.argsort(a, kind="stable")
            starts = np.searchsorted(a[order], np.arange(nl + 1))
            vs = v[order]
            P.update(gemm=True, nlist=nl, order=order, starts=starts,
                     CT=np.ascontiguousarray(-2.0 * C.T), cn=np.einsum("ij,ij->i", C, C),
                     VT=[np.ascontiguousarray(-2.0 * vs[starts[j]:starts[j + 1]].T) for j in range(nl)],
                     vsq=np.einsum("ij,ij->i", vs, vs))
        cache[key] = P
        return P

    def query(self, q: np.ndarray, k: int) -> NeighborResult:
        emb = self.embeddings
        n = len(emb)
        check_range("k", k, 1, math.inf, integer=True)
        if k > n:
            raise InvalidArgument(f"k must be <= the vocabulary size {n}; got {k}")
        q = np.ascontiguousarray(q, dtype=np.float32)
        if q.ndim != 2 or q.shape[1] != emb.dim:
            raise InvalidArgument(f"queries must have shape (B, {emb.dim}); got {q.shape}")
        if not np.isfinite(q).all():
            raise InvalidArgument("queries must be finite")
        if q.shape[0] == 0:
            return NeighborResult(np.empty((0, k), np.int64), np.empty((0, k), np.float64))
        P = self._index()
        nprobe = min(self.nprobe, P["ivf"].nlist) if P["ivf"] is not None else self.nprobe
        if P["gemm"] and self.batched:
            labels = self._batched_ivf(P, q, k, nprobe)
        else:
            faiss = self._faiss()
            faiss.omp_set_num_threads(self.num_threads)
            idx = P["index"]
            if P["ivf"] is not None:
                P["ivf"].nprobe = nprobe
            if hasattr(faiss.downcast_index(idx), "hnsw"):
                faiss.downcast_index(idx).hnsw.efSearch = max(self.ef_search, k * self.k_factor)
            kk = min(n, k * self.k_factor)
            _, labels = idx.search(q, kk)
            labels = labels.astype(np.int64)
        nt = max(1, min(self.num_threads, q.shape[0] // 512))
        if nt > 1:   # numpy releases the GIL in the gather / float64 maths
            from concurrent.futures import ThreadPoolExecutor

            parts = np.array_split(np.arange(q.shape[0]), nt)
            with ThreadPoolExecutor(nt) as pool:
                rs = list(pool.map(lambda r: _rerank(emb, q[r], labels[r], k), parts))
            res = NeighborResult(np.concatenate([r.ids for r in rs]), np.concatenate([r.dists for r in rs]))
        else:
            res = _rerank(emb, q, labels, k)
        short = (labels < 0).sum(axis=1) > labels.shape[1] - k   # fewer than k candidates found
        if short.any():   # rare (tiny inverted lists): answer those queries exactly
            ex = ExactIndex(emb).query(q[short], k)
            res.ids[short], res.dists[short] = ex.ids, ex.dists
        return res

    def _batched_ivf(self, P: dict, q: np.ndarray, k: int, nprobe: int) -> np.ndarray:
        from concurrent.futures import ThreadPoolExecutor

        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
            from contextlib import nullcontext as _nc

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

        with threadpool_limits(limits=1), ThreadPoolExecutor(nt) as pool:
            A = np.concatenate(list(pool.map(coarse, np.array_split(np.arange(B), nt))))
            flat = A.ravel()
            qo = np.argsort(flat, kind="stable")
            qs = np.searchsorted(flat[qo], np.arange(nl + 1))
            qrow = qo // nprobe

            def scan(lists: range) -> None:
                for j in lists:
                    s, e = qs[j], qs[j + 1]
                    m = starts[j + 1] - starts[j]
                    if s == e or m == 0:
                        continue
                    D = q[qrow[s:e]] @ VT[j]
                    D += vsq[starts[j]:starts[j + 1]]
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
                        part = np.argpartition(D, kk - 1, axis=1)[:, :kk] if kk < m else np.broadcast_to(np.arange(m), D.shape)
                        cd[dst, :kk] = np.take_along_axis(D, part, axis=1)
                        ci[dst, :kk] = part + starts[j]

            list(pool.map(scan, [range(t, nl, nt) for t in range(nt)]))
        cd = cd.reshape(B, nprobe * k)
        ci = ci.reshape(B, nprobe * k)
        if nprobe > 1:
            sel = np.argsort(cd, axis=1, kind="stable")[:, :k]
            ci = np.take_along_axis(ci, sel, axis=1)
        return np.where(ci >= 0, P["order"][ci.clip(0)], -1)


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

def make_index(embeddings: Embeddings, index: str = "exact", **kw: Any) -> Any:
    if index == "exact":
        return ExactIndex(embeddings)
    if index == "hnsw":
        return HnswIndex(embeddings, **kw)
    if index == "faiss":
        return FaissIndex(embeddings, **kw)
    raise InvalidArgument(f"index must be 'exact', 'hnsw' or 'faiss'; got {index!r}")


def topk_recall(approx: NeighborResult, exact: NeighborResult) -> float:
    """Fraction of the exact top-k ids found in the approximate top-k (set recall per query)."""
    k = exact.ids.shape[1]
    hit = (approx.ids[:, :, None] == exact.ids[:, None, :]).any(axis=1)
    return float(hit.sum() / (exact.ids.shape[0] * k))
