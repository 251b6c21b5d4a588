"""The exact search's cross-process memo (``PRIVNLP_EXACT_MEMO``, used by ``make check-cards``) returns
the answer a fresh search returns, bit for bit, never a stale or too-short one; and the small-vocabulary
fast path (float32 prescreen in cache-sized blocks) returns the brute-force answer."""

import os
import threading
import time

import numpy as np
import pytest

from privnlp.mechanisms.text import Embeddings
from privnlp.mechanisms.text import neighbors as nbm
from privnlp.mechanisms.text.neighbors import ExactIndex


def brute_force(E, q, k):
    E64, q64 = E.astype(np.float64), q.astype(np.float64)
    D = ((E64[None, :, :] - q64[:, None, :]) ** 2).sum(-1)
    ids = np.stack([np.lexsort((np.arange(len(E)), D[i]))[:k] for i in range(len(q))])
    return ids, np.sqrt(np.take_along_axis(D, ids, axis=1))


def tie_heavy_case(n, d, seed, b=300):
    """Duplicate and near-duplicate rows, queries on vocabulary points and on midpoints."""
    g = np.random.default_rng(seed)
    E = (g.standard_normal((n, d)) * 3.0 + 5.0).astype(np.float32)
    E[1] = E[0]
    E[3] = E[2] * np.float32(1 + 2e-7)
    E[7] = np.nextafter(E[6], np.float32(np.inf))
    src = g.integers(0, n, b)
    q = (E[src] + g.standard_normal((b, d)).astype(np.float32) * 0.8).astype(np.float32)
    q[:40] = E[src[:40]]
    i, j = g.integers(0, n, 40), g.integers(0, n, 40)
    q[40:80] = 0.5 * E[i] + 0.5 * E[j]
    q[80:84] = E[6]
    return E, q


@pytest.fixture
def vocab():
    E, q = tie_heavy_case(1000, 24, seed=11)
    return Embeddings(tuple(f"w{i}" for i in range(len(E))), E), E, q


@pytest.fixture
def memo(tmp_path, monkeypatch):
    monkeypatch.setenv(nbm.MEMO_ENV, str(tmp_path / "memo"))
    monkeypatch.setattr(nbm, "MEMO_MIN_QUERIES", 16)
    return tmp_path / "memo"


def counting(monkeypatch):
    calls = []
    orig = ExactIndex._query

    def spy(self, q, k):
        calls.append(k)
        return orig(self, q, k)

    monkeypatch.setattr(ExactIndex, "_query", spy)
    return calls


def test_memo_answers_equal_a_fresh_search_and_prefixes_serve_smaller_k(vocab, memo, monkeypatch):
    emb, E, q = vocab
    calls = counting(monkeypatch)
    r3 = ExactIndex(emb).query(q, 3)
    assert calls == [3] and len(list(memo.glob("*.npz"))) == 1 and not list(memo.glob("*.lock"))
    for k in (3, 2, 1):  # from the memo: no search
        r = ExactIndex(emb).query(q, k)
        ref_ids, ref_d = brute_force(E, q, k)
        np.testing.assert_array_equal(r.ids, ref_ids)
        np.testing.assert_array_equal(r.ids, r3.ids[:, :k])
        np.testing.assert_array_equal(r.dists, r3.dists[:, :k])  # bit for bit
        assert r.ids.dtype == np.int64
    assert calls == [3]
    monkeypatch.delenv(nbm.MEMO_ENV)
    fresh = ExactIndex(emb).query(q, 2)  # no memo: the same bits
    np.testing.assert_array_equal(fresh.dists, r3.dists[:, :2])


def test_memo_searches_again_for_a_larger_k_a_new_query_or_another_vocabulary(
    vocab, memo, monkeypatch
):
    emb, E, q = vocab
    calls = counting(monkeypatch)
    ExactIndex(emb).query(q, 1)
    r = ExactIndex(emb).query(q, 3)  # the stored top-1 is not enough
    np.testing.assert_array_equal(r.ids, brute_force(E, q, 3)[0])
    ExactIndex(emb).query(q, 2)  # the entry now holds k = 3
    assert calls == [1, 3]
    q2 = q.copy()
    q2[5, 0] = np.nextafter(q2[5, 0], np.float32(np.inf))  # one ulp: another query
    np.testing.assert_array_equal(ExactIndex(emb).query(q2, 2).ids, brute_force(E, q2, 2)[0])
    E2 = E.copy()
    E2[q.shape[0] % len(E2)] += 1.0
    emb2 = Embeddings(emb.words, E2)
    np.testing.assert_array_equal(ExactIndex(emb2).query(q, 2).ids, brute_force(E2, q, 2)[0])
    assert calls == [1, 3, 2, 2]
    monkeypatch.setattr(nbm, "MEMO_MIN_QUERIES", 10**6)  # small batches are not memoised
    ExactIndex(emb).query(q, 1)
    assert calls == [1, 3, 2, 2, 1]


def test_memo_waits_for_the_process_computing_the_entry(vocab, memo, monkeypatch):
    """Another process holds the entry's lock for k = 3: a k = 2 search waits and reads its result."""
    emb, E, q = vocab
    ExactIndex(emb).query(q, 3)
    entry = next(memo.glob("*.npz"))
    saved = entry.read_bytes()
    entry.unlink()
    lock = entry.with_suffix(".lock")
    lock.write_text("3")
    calls = counting(monkeypatch)

    def other_process():
        time.sleep(0.3)
        entry.write_bytes(saved)
        lock.unlink()

    th = threading.Thread(target=other_process)
    th.start()
    r = ExactIndex(emb).query(q, 2)
    th.join()
    assert calls == []
    np.testing.assert_array_equal(r.ids, brute_force(E, q, 2)[0])


def test_memo_does_not_wait_for_a_smaller_k_or_a_stale_lock(vocab, memo, monkeypatch):
    emb, E, q = vocab
    ExactIndex(emb).query(q, 1)
    entry = next(memo.glob("*.npz"))
    entry.unlink()
    lock = entry.with_suffix(".lock")
    lock.write_text("1")  # the other process computes k = 1 only: search here, do not wait
    calls = counting(monkeypatch)
    t0 = time.monotonic()
    r = ExactIndex(emb).query(q, 2)
    assert calls == [2] and time.monotonic() - t0 < 5
    np.testing.assert_array_equal(r.ids, brute_force(E, q, 2)[0])
    assert lock.exists()  # not ours: left alone
    entry.unlink()
    lock.write_text("3")
    old = time.time() - 2 * nbm.MEMO_WAIT_S
    os.utime(lock, (old, old))  # a killed process's lock
    t0 = time.monotonic()
    r = ExactIndex(emb).query(q, 2)
    assert calls == [2, 2] and time.monotonic() - t0 < 5


def test_a_corrupt_entry_is_searched_again(vocab, memo, monkeypatch):
    emb, E, q = vocab
    ExactIndex(emb).query(q, 2)
    entry = next(memo.glob("*.npz"))
    entry.write_bytes(b"not an npz")
    calls = counting(monkeypatch)
    r = ExactIndex(emb).query(q, 2)
    assert calls == [2]
    np.testing.assert_array_equal(r.ids, brute_force(E, q, 2)[0])


def test_small_vocabulary_uses_fp32_in_cache_sized_blocks_and_stays_exact(monkeypatch):
    """Auto precision is fp32 for a small prescreen matrix and its blocks hold <= SMALL_BLOCK_BYTES
    of scores (many blocks here); the answer is the brute-force one, near-ties included."""
    E, q = tie_heavy_case(1000, 24, seed=5)
    emb = Embeddings(tuple(f"w{i}" for i in range(len(E))), E)
    idx = ExactIndex(emb, strategy="scan")
    assert idx.small_prescreen() and idx.resolved_precision() == "fp32"
    blocks = []
    orig = ExactIndex._query_block

    def spy(self, P, qq, k):
        blocks.append(qq.shape[0])
        return orig(self, P, qq, k)

    monkeypatch.setattr(ExactIndex, "_query_block", spy)
    monkeypatch.setattr(nbm, "SMALL_BLOCK_BYTES", 64 * 1024 * 4)  # 64 queries of 1024 fp32 scores
    for k in (1, 2, 3):
        r = idx.query(q, k)
        ref_ids, ref_d = brute_force(E, q, k)
        np.testing.assert_array_equal(r.ids, ref_ids)
        np.testing.assert_allclose(r.dists, ref_d, rtol=1e-12, atol=1e-12)
    assert max(blocks) == 64 and len(blocks) == 3 * 5
    big = Embeddings(("a", "b"), np.zeros((2, 24), np.float32))
    monkeypatch.setattr(nbm, "SMALL_PRESCREEN_BYTES", 0)
    assert not ExactIndex(big).small_prescreen()
