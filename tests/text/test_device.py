"""Issue 31 item 3: the device path (torch exact top-k) gives the CPU exact path's answer.

Run here with torch on the CPU (``device="torch-cpu"``); on a GPU machine the same tests run with
``PRIVNLP_TEST_DEVICE=cuda``. No GPU figure is claimed from this machine."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from privnlp.mechanisms.text import Embeddings, LaplaceMetric, Mahalanobis, Vickrey, VickreyK
from privnlp.mechanisms.text.files import sanitize_file, sidecar_path
from privnlp.mechanisms.text.neighbors import ExactIndex, TorchIndex

pytest.importorskip("torch")
DEVICE = os.environ.get("PRIVNLP_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def emb():
    g = np.random.default_rng(4)
    n, d = 6000, 32
    centers = g.standard_normal((60, d))
    E = (centers[g.integers(0, 60, n)] + 0.3 * g.standard_normal((n, d))).astype(np.float32)
    E[100] = E[101]  # exact duplicates: ties must break to the lower id, as on the CPU
    E[2000:2003] = E[7]
    return Embeddings(tuple(f"w{i}" for i in range(n)), E)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_torch_index_equals_exact_index(emb, k):
    g = np.random.default_rng(k)
    m = Vickrey(12.0, embeddings=emb)
    q = emb.vectors[g.integers(0, len(emb), 3000)] + m.sample_noise(3000, rng=g)
    q[:10] = emb.vectors[[100, 101, 7, 2000, 2001, 2002, 0, 1, 2, 3]]  # on the duplicates
    ti = TorchIndex(emb, device=DEVICE, block=700)
    got, ref = ti.query(q, k), ExactIndex(emb).query(q, k)
    np.testing.assert_array_equal(got.ids, ref.ids)
    np.testing.assert_array_equal(got.dists, ref.dists)  # the same float64 distances, bit for bit
    assert got.ids[0, 0] == 100 and got.ids[2, 0] == 7


@pytest.mark.parametrize("cls,kw", [(Vickrey, {"t": 0.5}), (VickreyK, {"ts": (1.0, 2.0, 3.0)})])
def test_device_path_same_output_as_cpu_exact(emb, tmp_path, cls, kw):
    dev = "torch-cpu" if DEVICE == "cpu" else DEVICE
    words = " ".join(emb.words[i] for i in range(0, 6000, 7))
    src = tmp_path / "in.txt"
    src.write_text("\n".join(words[i : i + 200] for i in range(0, len(words), 200)))
    outs = {}
    for name, d in (("cpu", "cpu"), ("dev", dev)):
        m = cls(3.0, embeddings=emb, index="exact" if d == "cpu" else "auto", device=d, **kw)
        dst = tmp_path / f"{name}.txt"
        sanitize_file(src, dst, m, seed=9, progress=False, chunk_records=5)
        outs[name] = dst.read_text()
        side = json.loads(sidecar_path(dst).read_text())
        assert side["index"]["kind"] == ("exact" if d == "cpu" else "torch")
    assert outs["dev"] == outs["cpu"]
    assert outs["cpu"] != src.read_text()


def test_device_refuses_approximate_index(emb):
    from privnlp.core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="index must be 'auto' or 'exact'"):
        Vickrey(3.0, embeddings=emb, index="faiss", device="cuda")


def test_device_search_batches_span_blocks_and_keep_the_output(emb, monkeypatch):
    """The device path searches many blocks per query (so the CPU re-rank of one block overlaps the next
    block's GEMM) whatever batch_tokens is; the noise is drawn before, so the output is the CPU one."""
    from privnlp.mechanisms.text import mechanisms

    dev = "torch-cpu" if DEVICE == "cpu" else DEVICE
    texts = [" ".join(emb.words[i] for i in range(j, 6000, 37)) for j in range(12)]
    sizes = []
    real = TorchIndex.query

    def spy(self, q, k):
        sizes.append(len(q))
        return real(self, q, k)

    monkeypatch.setattr(TorchIndex, "query", spy)
    monkeypatch.setattr(mechanisms, "DEVICE_SEARCH_BLOCKS", 2)
    cpu = Vickrey(3.0, embeddings=emb, index="exact", batch_tokens=64)
    gpu = Vickrey(3.0, embeddings=emb, device=dev, batch_tokens=64)
    # blocks of batch_tokens queries: device memory bounded by batch_tokens x V
    assert gpu._nn().block == 64
    gpu._nn().block = 300
    a = [r.text for r in cpu.sanitize_many(texts, seed=5)]
    b = [r.text for r in gpu.sanitize_many(texts, seed=5)]
    assert a == b and a != texts
    n = sum(len(t.split()) for t in texts)  # searches of 600 words (2 blocks), not 64
    assert sizes == [600] * (n // 600) + [n % 600]


# -- the whole mechanism on the device: noise, search and choice in torch (device_noise=True) --------


def _dev():
    return "torch-cpu" if DEVICE == "cpu" else DEVICE


def _gen(seed):
    import torch

    return torch.Generator(device=DEVICE).manual_seed(seed)


@pytest.mark.parametrize(
    "cls,kw",
    [
        (Vickrey, {"t": 0.5}),
        (Vickrey, {"t": 0.0}),
        (VickreyK, {"ts": (1.0, 2.0, 3.0)}),
        (LaplaceMetric, {}),
        (Mahalanobis, {"lam": 0.5}),
    ],
)
def test_device_pipeline_equals_cpu_exact_path_for_the_same_noisy_vectors(emb, cls, kw):
    """Issue #31 item 3's equality: the device's output is what the CPU exact index and the CPU
    choice give for the device's own noisy vectors and selection uniforms (bit for bit)."""
    g = np.random.default_rng(3)
    ids = g.integers(0, len(emb), 5000)
    ids[:40] = [100, 101, 7, 2000, 2001, 2002, 0, 1] * 5  # exact duplicates among the rows
    dev = cls(2.0, embeddings=emb, device=_dev(), batch_tokens=700, **kw)
    cpu = cls(2.0, embeddings=emb, index="exact", **kw)
    assert dev._on_device()
    out, q, u = dev._perturb_on_device(ids, _gen(11), keep=True)
    ref = cpu._choose_u(ExactIndex(emb).query(q, cpu._search_k()), u)
    np.testing.assert_array_equal(out, ref)
    assert q.shape == (5000, emb.dim) and u.shape == (5000,)
    assert (out != ids).mean() > 0.3  # epsilon 2 on this vocabulary: most words change


def test_device_pipeline_ties_go_to_the_cpu_and_break_to_the_lower_id(emb):
    """Almost no noise: the noisy vector of row 101 is equally far from rows 100 and 101 (the same
    vector), an exact float64 tie: the device flags it, the CPU index answers, the lower id wins."""
    m = LaplaceMetric(1e7, embeddings=emb, device=_dev())
    out = m._perturb_on_device(np.array([101, 2002, 5, 101]), _gen(0))
    assert out.tolist() == [100, 7, 5, 100]
    assert m._last_device_fallback == 3  # the three tied rows; row 5 certified on the device


def test_device_noise_distribution(emb):
    """The torch noise is the mechanism's: radius ~ Gamma(d, 1/eps) (KS p > 1e-3), directions uniform
    (mean of unit vectors within 4 standard errors of 0, second moment I/d within 10%). 40,000 draws, seeded."""
    from scipy import stats

    eps, n, d = 3.0, 40_000, emb.dim
    m = Vickrey(eps, embeddings=emb, device=_dev())
    z = m.sample_noise_torch(n, _gen(5)).cpu().numpy().astype(np.float64)
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(d, scale=1 / eps).cdf).pvalue > 1e-3
    dirs = z / r[:, None]
    assert np.abs(dirs.mean(0)).max() < 4 / np.sqrt(n * d)
    cov = dirs.T @ dirs / n
    assert np.abs(np.diag(cov) * d - 1).max() < 0.1
    # the leaky radius (Gamma(1, 1/eps)) is refused by the same test
    assert stats.kstest(r / d, stats.gamma(d, scale=1 / eps).cdf).pvalue < 1e-6


def test_device_noise_mahalanobis_shape(emb):
    """Mahalanobis on the device: Sigma_l^{-1/2} z has the Euclidean radius law Gamma(d, 1/eps)."""
    from scipy import stats

    m = Mahalanobis(4.0, lam=0.7, embeddings=emb, device=_dev())
    z = m.sample_noise_torch(30_000, _gen(2)).cpu().numpy().astype(np.float64)
    m.sigma_sqrt()
    inv_root = emb._cache[("mahalanobis_sqrt", 0.7)][1]
    r = np.linalg.norm(z @ inv_root, axis=1)
    assert stats.kstest(r, stats.gamma(emb.dim, scale=1 / 4.0).cdf).pvalue > 1e-3
    assert (
        stats.kstest(np.linalg.norm(z, axis=1), stats.gamma(emb.dim, scale=1 / 4.0).cdf).pvalue
        < 1e-6
    )


def test_device_pipeline_same_mechanism_as_cpu(emb):
    """Different draws, same output law: P[out = in] and P[out = 2nd neighbour of the input] on
    20,000 words agree with the CPU path within 0.02 (about 4 standard errors of the difference)."""
    g = np.random.default_rng(8)
    ids = g.integers(0, len(emb), 20_000)
    cpu = Vickrey(4.0, t=0.5, embeddings=emb, index="exact").perturb_ids(ids, rng=1)
    dev = Vickrey(4.0, t=0.5, embeddings=emb, device=_dev()).perturb_ids(ids, rng=1)
    assert abs((cpu == ids).mean() - (dev == ids).mean()) < 0.02
    second = ExactIndex(emb).query(emb.vectors[ids], 2).ids[:, 1]
    assert abs((cpu == second).mean() - (dev == second).mean()) < 0.02
    assert not np.array_equal(cpu, dev)  # device draws, not numpy's


def test_device_pipeline_seeds_and_secure_noise(emb):
    from privnlp.core.rng import is_secure, secure_numpy

    ids = np.arange(0, 6000, 3)
    m = Vickrey(3.0, embeddings=emb, device=_dev())
    a, b = m.perturb_ids(ids, rng=4), m.perturb_ids(ids, rng=4)
    np.testing.assert_array_equal(a, b)  # a seeded simulation reproduces (same device kind)
    assert is_secure(m._torch_generator(secure_numpy()))
    assert not is_secure(m._torch_generator(np.random.default_rng(0)))
    c, d = m.perturb_ids(ids), m.perturb_ids(ids)  # OS entropy: two runs differ
    assert not np.array_equal(c, d)


def test_device_noise_false_and_leaky_twins_keep_the_host_path(emb):
    """``device_noise=False`` draws with numpy (the CPU's seeded output on every device); a subclass
    that overrides the noise without a torch twin (the leaky wrong-radius twin) never runs the device
    noise, so its bug is not silently replaced by the correct noise."""
    from privnlp.mechanisms.text.mechanisms import LeakyVickreyWrongRadius

    ids = np.arange(0, 6000, 5)
    cpu = Vickrey(3.0, embeddings=emb, index="exact").perturb_ids(ids, rng=2)
    host = Vickrey(3.0, embeddings=emb, device=_dev(), device_noise=False)
    assert not host._on_device()
    np.testing.assert_array_equal(host.perturb_ids(ids, rng=2), cpu)
    leaky = LeakyVickreyWrongRadius(3.0, embeddings=emb, device=_dev())
    assert not leaky._on_device()
    ref = LeakyVickreyWrongRadius(3.0, embeddings=emb, index="exact").perturb_ids(ids, rng=2)
    np.testing.assert_array_equal(leaky.perturb_ids(ids, rng=2), ref)


def test_device_sanitize_many_with_a_shared_generator(emb):
    """``sanitize_many(rng=...)`` (the CLI without --seed: OS entropy) runs on the device: reproducible
    with a seeded rng, OOV draws on the host, the text's layout kept."""
    texts = [
        " ".join(emb.words[i] for i in range(200 + j, 1900, 97)) + " zzqx, w5." for j in range(5)
    ]
    m = LaplaceMetric(1e7, embeddings=emb, device=_dev())  # almost no noise: the words come back
    res = m.sanitize_many(texts, rng=3)
    assert [r.text.rsplit(" ", 2)[0] for r in res] == [t.rsplit(" ", 2)[0] for t in texts]
    assert all(r.text.endswith(", w5.") and "zzqx" not in r.text for r in res)  # OOV: a random word
    m2 = Vickrey(3.0, embeddings=emb, device=_dev())
    a = [r.text for r in m2.sanitize_many(texts, rng=6)]
    assert a == [r.text for r in m2.sanitize_many(texts, rng=6)] and a != texts
