"""Issue 31 item 1: ``index="auto"``: exact for small inputs, a calibrated approximate index for large
ones (top-k recall >= 0.99 measured on a public probe, recorded in the sidecar and the claim), cached."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from privnlp.mechanisms.text import Embeddings, Vickrey, VickreyK
from privnlp.mechanisms.text.files import sanitize_file, sidecar_path
from privnlp.mechanisms.text.neighbors import ExactIndex, FaissIndex, topk_recall

pytest.importorskip("faiss")


@pytest.fixture(scope="module")
def big_emb():
    """25,000 clustered 16-d vectors (>= 20k rows: the faiss index is cached on disk)."""
    g = np.random.default_rng(5)
    n, d = 25_000, 16
    centers = 3.0 * g.standard_normal((200, d))
    E = (centers[g.integers(0, 200, n)] + 0.6 * g.standard_normal((n, d))).astype(np.float32)
    return Embeddings(tuple(f"w{i}" for i in range(n)), E)


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVNLP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _mech(emb, cls=Vickrey, **kw):
    return cls(8.0, embeddings=emb, auto_exact_vocab=1000, **kw)


def test_auto_is_exact_for_small_inputs_and_small_vocabularies(big_emb, cache):
    m = _mech(big_emb)
    assert m.plan_index(5_000) == "exact"
    assert m.index_report()["kind"] == "exact" and "5000" in m.index_report()["why"]
    small = Vickrey(8.0, embeddings=big_emb.restrict(top_k=500))
    assert small.plan_index(10**9) == "exact"  # vocabulary <= auto_exact_vocab (50,000)
    assert any(n.startswith("exact nearest neighbours") for n in m.claim().notes)


@pytest.mark.parametrize("cls,k", [(Vickrey, 2), (VickreyK, 3)])
def test_auto_calibrates_recall_and_records_it(big_emb, cache, cls, k):
    m = _mech(big_emb, cls)
    assert m.plan_index(10**6) == "faiss"
    rep = m.index_report()
    cal = rep["calibration"]
    assert cal["k"] == k and cal["target"] == 0.99 and cal["recall"] >= 0.99
    assert cal["value"] == rep["nprobe"] and cal["tried"][-1] == [rep["nprobe"], cal["recall"]]
    assert all(r < 0.99 for _, r in cal["tried"][:-1])  # the smallest nprobe that reaches it
    note = [n for n in m.claim().notes if n.startswith("approximate nearest neighbours")]
    assert note and f"nprobe={rep['nprobe']}" in note[0] and f"{cal['recall']:.4f}" in note[0]
    # the measurement holds on fresh noisy vectors of the mechanism (not the probe itself)
    g = np.random.default_rng(11)
    rows = g.integers(0, 5000, 3000)
    q = big_emb.vectors[rows] + m.sample_noise(3000, rng=g)
    rec = topk_recall(m._nn().query(q, k), ExactIndex(big_emb).query(q, k))
    assert rec >= 0.98, rec


def _fresh(emb):
    """The same vectors without the in-memory caches (a new process)."""
    return Embeddings(emb.words, emb.vectors)


def test_calibration_and_index_cached_on_disk(big_emb, cache, monkeypatch):
    m = _mech(_fresh(big_emb))
    m.plan_index(10**6)
    first = m.index_report()
    assert list((cache / "faiss").glob("*.faiss")) and list(
        (cache / "ann_calibration").glob("*.json")
    )

    def boom(*a, **k):
        raise AssertionError("recalibrated / retrained although cached")

    monkeypatch.setattr(FaissIndex, "calibrate", boom)
    monkeypatch.setattr("faiss.index_factory", boom)
    again = _mech(_fresh(big_emb))
    again.plan_index(10**6)
    assert again.index_report() == first
    # another epsilon is another noise: a new calibration
    other = Vickrey(2.0, embeddings=_fresh(big_emb), auto_exact_vocab=1000)
    with pytest.raises(AssertionError, match="recalibrated"):
        other.plan_index(10**6)


def test_no_default_below_target():
    import inspect

    assert inspect.signature(FaissIndex).parameters["nprobe"].default is None
    sig = inspect.signature(Vickrey.__mro__[1].__init__).parameters
    assert sig["index"].default == "auto" and sig["ann_nprobe"].default is None
    assert sig["ann_ef"].default is None and sig["recall_target"].default == 0.99


def test_sidecar_records_the_index(big_emb, cache, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("w1 w2 w3\nw4 w5\n" * 50)
    dst = tmp_path / "out.txt"
    m = _mech(big_emb, auto_exact_words=10)
    sanitize_file(src, dst, m, seed=1, progress=False)
    side = json.loads(sidecar_path(dst).read_text())
    assert side["index"]["kind"] == "faiss" and side["index"]["calibration"]["recall"] >= 0.99
    assert any("recall" in n for n in side["claim_per_word"]["notes"])
    m2 = _mech(big_emb)
    sanitize_file(src, tmp_path / "out2.txt", m2, seed=1, progress=False)
    assert json.loads(sidecar_path(tmp_path / "out2.txt").read_text())["index"]["kind"] == "exact"


def test_direct_short_call_plans_exact(big_emb, cache):
    """A short text through the Python API stays exact (no index build, no probe) on a big vocabulary."""
    m = _mech(big_emb)
    m.sanitize("w1 w2 w3", seed=0)
    assert m.index_report()["kind"] == "exact" and "input of about 3" in m.index_report()["why"]
    big = _mech(big_emb, auto_exact_words=2)
    big.perturb_ids(np.arange(10), rng=0)
    assert big.index_report()["kind"] == "faiss"


def test_scan_layout_cached_next_to_the_index(big_emb, cache, monkeypatch):
    """The batched scan's arrays are cached on disk: a second process answers without reading the faiss
    file (same candidates); a rebuilt faiss file or a damaged layout is not trusted (rebuilt)."""
    g = np.random.default_rng(3)
    q = big_emb.vectors[g.integers(0, 5000, 2000)] + 0.3 * g.standard_normal((2000, 16)).astype(
        np.float32
    )
    first = FaissIndex(_fresh(big_emb), nprobe=8).query(q, 2)
    (faiss_file,) = (cache / "faiss").glob("*.faiss")
    layout = sorted((cache / "faiss").glob("*.gemm1.np*"))
    assert [p.suffix for p in layout] == [".npy", ".npz"]

    def boom(*a, **k):
        raise AssertionError("faiss file read although the layout is cached")

    with monkeypatch.context() as mp:
        mp.setattr("faiss.read_index", boom)
        again = FaissIndex(_fresh(big_emb), nprobe=8)
        res = again.query(q, 2)
        assert np.array_equal(res.ids, first.ids) and np.array_equal(res.dists, first.dists)
        assert again._index()["index"] is None  # no faiss object loaded
    # the non-batched path on a cached layout loads the faiss index when it needs it
    native = FaissIndex(_fresh(big_emb), nprobe=8, batched=False)
    assert topk_recall(native.query(q, 2), first) >= 0.999
    # a faiss file written after the layout (another build): the layout is stale -> rebuilt from it
    st = faiss_file.stat()
    os.utime(faiss_file, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    calls = []
    orig = FaissIndex._layout
    monkeypatch.setattr(FaissIndex, "_layout", lambda self, idx: calls.append(1) or orig(self, idx))
    FaissIndex(_fresh(big_emb), nprobe=8)._index()
    assert calls == [1]
    FaissIndex(_fresh(big_emb), nprobe=8)._index()  # the fresh layout is used again
    assert calls == [1]
    # a truncated vector file: ignored, rebuilt, same answers
    npy = next(p for p in layout if p.suffix == ".npy")
    npy.write_bytes(npy.read_bytes()[:1000])
    res = FaissIndex(_fresh(big_emb), nprobe=8).query(q, 2)
    assert calls == [1, 1] and np.array_equal(res.ids, first.ids)
