"""Seeded statistical tests of the metric-DP word mechanisms (paper: vickrey-mechanism-metric-dp.txt).

Tolerances: KS / chi-square p-values > 1e-3 on fixed seeds (the tests are deterministic; the
thresholds state how unlikely a correct implementation is to fail on a fresh seed); the metric-DP
audit uses one-sided Clopper-Pearson bounds at 1e-4 (Bonferroni over outputs).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privnlp.attacks.text.bayesian import metric_dp_audit
from privnlp.core.errors import InvalidArgument, InvalidPrivacyParameter
from privnlp.mechanisms.text import (
    Embeddings,
    LaplaceMetric,
    LeakyVickreyExcludesInput,
    Mahalanobis,
    Vickrey,
    VickreyK,
)


def _emb(n=40, d=6, seed=0, scale=1.0):
    g = np.random.default_rng(seed)
    return Embeddings(tuple(f"w{i}" for i in range(n)), scale * g.standard_normal((n, d)))


@pytest.mark.parametrize("d,eps", [(1, 2.0), (6, 3.0), (50, 10.0)])
def test_radius_is_gamma_d_over_eps(d, eps):
    mech = LaplaceMetric(eps, embeddings=_emb(n=5, d=d))
    z = mech.sample_noise(20000, rng=np.random.default_rng(1), dtype=np.float64)
    r = np.linalg.norm(z, axis=1)
    assert stats.kstest(r, stats.gamma(a=d, scale=1 / eps).cdf).pvalue > 1e-3
    # the test can fail: a 1-D Laplace radius (Gamma(1, 1/eps)) is rejected for d > 1
    if d > 1:
        assert stats.kstest(r, stats.gamma(a=1, scale=1 / eps).cdf).pvalue < 1e-6
    # the direction is uniform: mean unit vector ~ 0 (|mean| < 5 / sqrt(n) per coordinate)
    u = z / r[:, None]
    assert np.all(np.abs(u.mean(axis=0)) < 5 / np.sqrt(len(u)))


def test_mahalanobis_noise_radius_in_its_metric():
    emb = _emb(n=200, d=5, seed=3)
    emb = Embeddings(emb.words, emb.vectors * np.array([5, 1, 1, 0.2, 1.0]))
    mech = Mahalanobis(2.0, lam=0.5, embeddings=emb)
    z = mech.sample_noise(20000, rng=np.random.default_rng(2), dtype=np.float64)
    rm = mech.metric(z, np.zeros_like(z))
    assert stats.kstest(rm, stats.gamma(a=5, scale=1 / 2.0).cdf).pvalue > 1e-3
    # noise is elongated along the high-variance axis
    assert z[:, 0].std() > 2 * z[:, 3].std()


def test_t0_equals_laplace_in_distribution():
    emb = _emb(n=30, d=4, seed=5)
    ids = np.full(30000, 7)
    a = Vickrey(2.0, t=0.0, embeddings=emb).perturb_ids(ids, rng=np.random.default_rng(10))
    b = LaplaceMetric(2.0, embeddings=emb).perturb_ids(ids, rng=np.random.default_rng(11))
    ca, cb = np.bincount(a, minlength=30), np.bincount(b, minlength=30)
    keep = (ca + cb) > 0
    p = stats.chi2_contingency(np.stack([ca[keep], cb[keep]])).pvalue
    assert p > 1e-3
    # and t = 0.5 is distinguishable from Laplace (the test has power)
    c = np.bincount(
        Vickrey(2.0, t=0.5, embeddings=emb).perturb_ids(ids, rng=np.random.default_rng(12)),
        minlength=30,
    )
    keep = (ca + c) > 0
    assert stats.chi2_contingency(np.stack([ca[keep], c[keep]])).pvalue < 1e-6


def _second_neighbour(emb, noisy):
    D = np.linalg.norm(
        emb.vectors.astype(np.float64)[None] - noisy[:, None].astype(np.float64), axis=2
    )
    return np.argsort(D, axis=1)[:, :2]


def test_t1_always_second_neighbour_and_t0_first():
    emb = _emb(n=50, d=8, seed=7)
    ids = np.arange(50).repeat(40)
    for t, col in ((1.0, 1), (0.0, 0)):
        mech = Vickrey(1.5, t=t, embeddings=emb)
        out = mech.perturb_ids(ids, rng=np.random.default_rng(3))
        noisy = emb.vectors[ids] + mech.sample_noise(ids.size, rng=np.random.default_rng(3))
        assert np.array_equal(out, _second_neighbour(emb, noisy)[:, col])


def test_vickrey_probability_formula():
    v = Vickrey(1.0, t=0.25)
    p = v.first_probability(np.array([1.0, 2.0]), np.array([3.0, 2.0]))
    assert np.allclose(p, [0.75 * 3 / (0.25 + 2.25), 0.75 * 2 / (0.5 + 1.5)])
    assert np.all(
        Vickrey(1.0, t=1.0).first_probability(np.array([0.0, 1.0]), np.array([1.0, 2.0])) == 0
    )


def _grid_emb():
    # 12 words: a 2-D grid plus some spread in 4 extra dims, neighbours ~1 apart
    g = np.random.default_rng(0)
    pts = np.array([[i, j] for i in range(4) for j in range(3)], dtype=float)
    return Embeddings(
        tuple(f"g{i}" for i in range(12)), np.hstack([pts, 0.3 * g.standard_normal((12, 4))])
    )


PAIRS = [(0, 1), (4, 5), (4, 7)]


@pytest.mark.parametrize(
    "factory",
    [
        lambda e: LaplaceMetric(1.5, embeddings=e),
        lambda e: Vickrey(1.5, t=0.5, embeddings=e),
        lambda e: Vickrey(1.5, t=1.0, embeddings=e),
        lambda e: VickreyK(1.5, ts=(1.0, 2.0, 0.5), embeddings=e),
        lambda e: Mahalanobis(1.5, lam=0.5, embeddings=e),
    ],
    ids=["laplace", "vickrey_t0.5", "vickrey_t1", "vickrey_k3", "mahalanobis"],
)
def test_metric_dp_audit_passes(factory):
    res = metric_dp_audit(
        factory(_grid_emb()), PAIRS, n_samples=40000, rng=np.random.default_rng(0)
    )
    assert res.passed, res


class _WrongRadius(Vickrey):
    """Leaky: 1-D Laplace radius Gamma(1, 1/eps) in d dimensions (noise d times too small)."""

    def sample_noise(self, n, *, rng, dtype=np.float32):
        z = super().sample_noise(n, rng=rng, dtype=np.float64)
        z *= (rng.gamma(1.0, 1.0 / self.epsilon, size=n) / np.linalg.norm(z, axis=1))[:, None]
        return z.astype(dtype)


@pytest.mark.parametrize(
    "twin", [LeakyVickreyExcludesInput, _WrongRadius], ids=["excludes_input", "wrong_radius"]
)
def test_metric_dp_audit_catches_leaky_twin(twin):
    res = metric_dp_audit(
        twin(1.5, t=0.5, embeddings=_grid_emb()),
        PAIRS,
        n_samples=40000,
        rng=np.random.default_rng(0),
    )
    assert not res.passed and res.max_excess > 0.5, res


def test_registered_leaky_twin_is_caught():
    from privnlp.core.registry import LEAKY_TWINS
    from privnlp.mechanisms.text import LeakyVickreyWrongRadius

    twin = LEAKY_TWINS.get("vickrey")
    assert twin is LeakyVickreyWrongRadius
    res = metric_dp_audit(
        twin(1.5, t=0.5, embeddings=_grid_emb()),
        PAIRS,
        n_samples=40000,
        rng=np.random.default_rng(0),
    )
    assert not res.passed and res.max_excess > 0.5, res
    out = LeakyVickreyExcludesInput(1.5, t=0.5, embeddings=_grid_emb()).perturb_ids(
        np.full(2000, 4), rng=0
    )
    assert not np.any(out == 4)


@pytest.mark.parametrize(
    "kw,err",
    [
        ({"epsilon": 0}, InvalidPrivacyParameter),
        ({"epsilon": -1}, InvalidPrivacyParameter),
        ({"epsilon": float("nan")}, InvalidPrivacyParameter),
        ({"t": 1.5}, InvalidArgument),
        ({"t": -0.1}, InvalidArgument),
        ({"oov": "drop"}, InvalidArgument),
        ({"index": "faiss2"}, InvalidArgument),
    ],
)
def test_bad_parameters(kw, err):
    base = {"epsilon": 1.0, "t": 0.5}
    base.update(kw)
    with pytest.raises(err) as e:
        Vickrey(**base)
    assert list(kw)[0] in str(e.value)


def test_bad_k_dims_vocab():
    with pytest.raises(InvalidArgument, match="k >= 1"):
        VickreyK(1.0, ts=())
    with pytest.raises(InvalidArgument, match="ts"):
        VickreyK(1.0, ts=(1.0, -1.0))
    with pytest.raises(InvalidArgument, match="empty"):
        Embeddings((), np.zeros((0, 3)))
    with pytest.raises(InvalidArgument, match="mismatched"):
        Embeddings(("a", "b"), np.zeros((3, 3)))
    mech = Vickrey(1.0, embeddings=_emb(n=5, d=3))
    with pytest.raises(InvalidArgument, match="mismatched"):
        mech.perturb_vectors(np.zeros((2, 4)), rng=0)
    with pytest.raises(InvalidArgument, match="vocabulary size"):
        VickreyK(1.0, ts=(1,) * 6, embeddings=_emb(n=5, d=3)).perturb_ids([0, 1], rng=0)


def test_noise_depends_on_rng_only_not_on_threads():
    """Batches above one chunk are drawn by child generators on several threads: the result is a
    function of the seed alone (1 thread == 4 threads), and the radius law still holds."""
    E = np.random.default_rng(0).standard_normal((50, 20)).astype(np.float32)
    emb = Embeddings(tuple(f"w{i}" for i in range(50)), E)

    class OneThread(Vickrey):
        noise_threads = 1

    class FourThreads(Vickrey):
        noise_threads = 4

    a = OneThread(5.0, embeddings=emb).sample_noise(
        7000, rng=np.random.default_rng(9), dtype=np.float64
    )
    b = FourThreads(5.0, embeddings=emb).sample_noise(
        7000, rng=np.random.default_rng(9), dtype=np.float64
    )
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[:2048], a[2048:4096])  # chunks are not copies of each other
    radii = np.linalg.norm(a, axis=1)
    assert stats.kstest(radii, stats.gamma(a=20, scale=1 / 5.0).cdf).pvalue > 1e-3
