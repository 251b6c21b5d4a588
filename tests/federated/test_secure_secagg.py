"""Issue #33 item 3, the distributed Skellam mechanism of the SecAgg+ mode (no processes): seeded statistical tests
of the client encoding (noise scale, unbiased rounding, clipping, the conditional-rounding L2 bound), the accounting
against dp_accounting's Gaussian (the Skellam bound converges to it and never undercuts it), the participation tail
bound, and the bad-input errors raised before any round."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.federated import flower
from privnlp.mechanisms.federated.secagg import (
    SkellamPlan,
    decode_sum,
    encode_update,
    participation_bound,
    rounding_l2_bound,
    secagg_adversary_bounds,
    server_bound,
    skellam_rdp,
)


def _plan(**kw):
    base = dict(clip_norm=1.0, levels=64, dim=50, clients=4, min_survivors=4, noise_multiplier=1.0)
    base.update(kw)
    return SkellamPlan(**base)


def test_client_noise_scale_and_unbiased_rounding():
    """Residual (encoded - scaled input) per coordinate: mean 0, variance 2 mu_i + rounding variance
    (<= 1/4). 200 encodings x 50 coordinates; tolerance 5% on the variance (~3.5 standard errors)."""
    plan = _plan()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(plan.dim)
    x *= 0.7 / np.linalg.norm(x)  # inside the clip norm: not clipped
    scaled = x / plan.gamma
    res = np.stack(
        [np.concatenate(encode_update([x[:20], x[20:]], plan, rng=rng)) for _ in range(200)]
    )
    assert np.all(res == np.rint(res))  # integers
    resid = res - scaled
    frac = scaled - np.floor(scaled)
    want_var = 2 * plan.mu_client + float(np.mean(frac * (1 - frac)))
    assert resid.var() == pytest.approx(want_var, rel=0.05)
    assert abs(resid.mean()) < 4 * math.sqrt(want_var / resid.size)


def test_clipping_and_conditional_rounding_bound():
    """A vector 100x over the clip norm is clipped to S before rounding (mean of encodings ~ clipped / gamma);
    with negligible noise every rounded vector meets the L2 bound B, on the worst case (norm exactly
    levels, every coordinate at a half)."""
    plan = _plan(noise_multiplier=1e-9, levels=8, dim=64)
    rng = np.random.default_rng(1)
    big = np.full(plan.dim, 100.0)
    enc = np.stack([encode_update([big], plan, rng=rng)[0] for _ in range(300)])
    clipped = big / np.linalg.norm(big) * plan.clip_norm / plan.gamma  # 1.0 per coordinate
    assert np.abs(enc.mean(0) - clipped).max() < 0.05
    half = np.full(plan.dim, 0.5 * plan.gamma)  # norm 4 levels, fractional part 0.5 everywhere
    norms = [np.linalg.norm(encode_update([half], plan, rng=rng)[0]) for _ in range(500)]
    assert max(norms) <= plan.l2_bound
    assert plan.l2_bound == pytest.approx(rounding_l2_bound(8, 64))


def test_sum_of_clients_decodes_to_the_clipped_sum_within_the_stated_error():
    """m clients' encodings summed (what SecAgg+ reveals) decode to the plain sum of the clipped updates within
    the quantisation bound plus the noise (6 sigma per coordinate)."""
    plan = _plan(clients=5, min_survivors=5, noise_multiplier=0.5, levels=256, dim=30)
    rng = np.random.default_rng(2)
    ups = [rng.standard_normal(plan.dim) * 0.1 for _ in range(5)]
    clipped = [u * min(1.0, plan.clip_norm / np.linalg.norm(u)) for u in ups]
    s = sum(np.concatenate(encode_update([u], plan, rng=rng)) for u in ups)
    dec = decode_sum([s], plan)[0]
    err = dec - sum(clipped)
    noise_sd = math.sqrt(2 * plan.mu) * plan.gamma
    assert np.linalg.norm(err) <= plan.quantisation_error_bound(5) + 6 * noise_sd * math.sqrt(
        plan.dim
    )
    assert np.abs(err).max() < 6 * noise_sd + 5 * plan.gamma


def test_dropped_clients_still_leave_the_full_noise():
    """The share is sized for t survivors: any t of m shares sum to at least Skellam(mu)."""
    plan = _plan(clients=5, min_survivors=3)
    assert plan.mu_client * 3 == pytest.approx(plan.mu)
    assert plan.mu_client * 5 > plan.mu


def test_skellam_rdp_converges_to_the_gaussian_and_never_undercuts_it():
    orders = list(range(2, 257))
    for mu in (1e3, 1e6):
        l2, l1 = 30.0, 90.0
        sk = skellam_rdp(orders, l2, l1, mu)
        gauss = np.asarray(orders) * l2**2 / (2 * 2 * mu)  # sigma^2 = 2 mu
        assert np.all(sk >= gauss)
    assert np.max(skellam_rdp(orders, 30.0, 90.0, 1e8) / (np.asarray(orders) * 900 / 4e8)) < 1.01
    # the server bound of a real plan vs dp_accounting's Gaussian with the same noise multiplier
    plan = _plan(levels=1024, dim=9, clients=3, min_survivors=3)
    sb = server_bound(plan, rounds=10, population=3, delta=1e-5)
    g = np.asarray(orders) * 10 / (2 * plan.noise_multiplier**2)
    eps_g, _ = compute_epsilon(orders, list(g), 1e-5)
    assert eps_g <= sb.epsilon <= 1.02 * eps_g
    assert sb.participations == 10 and sb.delta_tail == 0.0


def test_participation_tail_bound():
    from scipy.stats import binom

    k = participation_bound(100, 0.05, 5e-6)
    assert binom.sf(k, 100, 0.05) <= 5e-6 < binom.sf(k - 1, 100, 0.05)
    plan = _plan(levels=64, dim=9, clients=5, min_survivors=5)
    sb = server_bound(plan, rounds=100, population=100, delta=1e-5)
    assert sb.participations == participation_bound(100, 0.05, 5e-6)
    assert sb.delta == pytest.approx(1e-5 + sb.delta_overflow)


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(min_survivors=2), r"secagg-min-survivors must be in \(2, 4\]"),
        (dict(min_survivors=5), r"selected clients cannot meet more than 4"),
        (dict(clients=1, min_survivors=1), "clients-per-round must be >= 2"),
        (dict(modulus_bits=40), r"secagg-bits must be in \[8, 32\]"),
        (dict(modulus_bits=12, clients=50, min_survivors=50), "modulus 2\\^12 too small"),
        (
            dict(modulus_bits=24, clients=50, min_survivors=50, levels=4096, noise_multiplier=50.0),
            "modulus 2\\^24 too small for the clipped, quantised, noised sum",
        ),
        (dict(noise_multiplier=0.0), "noise-multiplier must be > 0"),
        (dict(levels=0), "secagg-levels must be >= 1"),
    ],
)
def test_bad_plans_are_refused_naming_the_parameter(kw, match):
    with pytest.raises(InvalidArgument, match=match):
        _plan(**kw)


def test_run_config_checked_before_any_process():
    base = {"aggregation": "secagg", "num-clients": 4, "clients-per-round": 4}
    assert flower.validate_run_config(base).dim == 9  # the linear task: 8 weights + bias
    for extra, match in [
        ({"secagg-min-survivors": 5}, "secagg-min-survivors"),
        ({"sampling": "poisson"}, "sampling must be 'fixed'"),
        ({"mechanism": "fedavg"}, "needs mechanism 'dp_fedavg'"),
        ({"seeded-noise": True}, "OS entropy"),
        ({"secagg-bits": 10, "secagg-levels": 4096}, "secagg-bits=10"),
        ({"aggregation": "trusted"}, "aggregation must be 'central' or 'secagg'"),
    ]:
        with pytest.raises(InvalidArgument, match=match):
            flower.validate_run_config({**base, **extra})
    assert flower.validate_run_config({"num-clients": 4}) is None  # central mode


def test_client_noise_is_drawn_from_os_entropy():
    """The generated ClientApp draws its noise share with privnlp.core.rng.secure_numpy (never from the run
    config's seed, which every party knows)."""
    src = flower._CLIENT_MODULE
    assert "rng=secure_numpy()" in src
    enc_call = src[src.index("sa.encode_update") - 200 : src.index("sa.encode_update") + 200]
    assert "seed" not in enc_call.replace("secure_numpy", "")


def test_l1_bound_holds_for_every_integer_vector_in_the_l2_ball():
    """Exhaustive on small cases: every integer vector with ||v||_2 <= B has ||v||_1 <= the plan's L1 bound."""
    import itertools

    for levels, dim in ((1, 3), (1, 4), (2, 3)):
        plan = _plan(levels=levels, dim=dim)
        b = plan.l2_bound
        r = int(math.floor(b))
        worst = max(
            sum(abs(x) for x in v)
            for v in itertools.product(range(-r, r + 1), repeat=dim)
            if math.sqrt(sum(x * x for x in v)) <= b
        )
        assert worst <= plan.l1_bound, (levels, dim, worst, plan.l1_bound)


def test_secagg_adversary_bounds_per_adversary_recomputed():
    """The public per-adversary list (the dp_fedavg card renders it): three adversaries, none amplified; with
    every user selected each round the server's epsilon is the Skellam RDP of one round composed ``rounds``
    times, converted by dp_accounting (recomputed here); the noise is sized for the threshold t, so dropping to
    t survivors leaves the same epsilon, and the eavesdropper's view depends on TLS."""
    plan = _plan(clients=4, min_survivors=3)
    bounds = secagg_adversary_bounds(plan, rounds=5, population=4, delta=1e-5)
    assert [b.adversary for b in bounds] == [
        "honest-but-curious server",
        "eavesdropper",
        "observer of the released models",
    ]
    assert not any(b.amplified for b in bounds)
    orders = list(range(2, 257))
    rdp = 5 * skellam_rdp(orders, plan.l2_bound, plan.l1_bound, plan.mu)
    eps, _ = compute_epsilon(orders, list(rdp), 1e-5)
    assert bounds[0].epsilon == pytest.approx(eps, rel=1e-12)
    assert bounds[0].delta == pytest.approx(1e-5 + min(1.0, 5 * plan.overflow_probability))
    assert "t = 3 of 4" in bounds[0].note
    # t survivors carry mu_client * t = mu: the same bound as a full round
    assert plan.mu_client * plan.min_survivors == pytest.approx(plan.mu)
    # sampling m < N: fewer participations, smaller (never larger) epsilon; still no amplification claimed
    sampled = secagg_adversary_bounds(plan, rounds=5, population=40, delta=1e-5)
    assert sampled[0].epsilon <= bounds[0].epsilon and not sampled[0].amplified
    assert "TLS" in bounds[1].observes
    assert (
        "in clear"
        in secagg_adversary_bounds(plan, rounds=5, population=4, delta=1e-5, tls=False)[1].observes
    )
