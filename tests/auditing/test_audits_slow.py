"""Long DP audits (``make repro``): repeated seeds of the quick audits, the full preset, and the tightness target
of issue #18 (the white-box one-step audit of DP-SGD reaches at least half the claimed epsilon at eps = 1 and
eps = 4).

Papers: Nasr et al. 2021 (white-box Gaussian mechanism audits nearly tightly), Jagielski et al. 2020, Steinke
et al. 2023, Mahloujifar et al. 2025 (see privnlp/auditing/bounds.py).
"""

from __future__ import annotations

import pytest

from privnlp.auditing import run_dp_audit

DP_DEFENSES = (
    "dp_sgd",
    "dp_fedavg",
    "dp_wordpiece",
    "laplace_metric",
    "vickrey",
    "vickrey_k",
    "mahalanobis",
)

pytestmark = pytest.mark.slow


def _check(suite):
    for r in suite.results:
        print(
            f"{suite.mechanism:15s} {r.system:10s} {r.variant[:60]:60s} claimed {r.claimed_epsilon:8.3f} "
            f"audited {r.audited.epsilon:8.3f} ({r.audited.method}) others "
            f"{[round(o.epsilon, 3) for o in r.others]} ratio {r.ratio:.2f} {r.seconds:.1f}s"
        )
        if r.system == "defense":
            for b in (r.audited, *r.others):
                assert b.epsilon <= r.claimed_epsilon, (suite.mechanism, r.variant, b)
    twin = suite.of("leaky_twin")
    assert twin and twin[0].violated, suite.mechanism


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_repeated_seeds_quick(seed, tmp_path):
    """For every DP defense, audited <= claimed on three more seeds; every leaky twin is caught."""
    for n in DP_DEFENSES:
        _check(run_dp_audit(n, preset="quick", seed=seed, cache_dir=tmp_path))


def test_full_preset_and_dp_sgd_tightness(tmp_path):
    for n in DP_DEFENSES:
        _check(run_dp_audit(n, preset="full", seed=0, cache_dir=tmp_path))
    suite = run_dp_audit("dp_sgd", preset="full", seed=0, cache_dir=tmp_path)
    rep = [r for r in suite.of("defense") if "repeated" in r.variant]
    targets = sorted(r.config["target_epsilon"] for r in rep)
    assert targets == [1.0, 4.0]
    for r in rep:
        # the tightness target: >= half the claim (GDP bound, Nasr et al. 2023 style)
        assert 0.5 * r.claimed_epsilon <= r.audited.epsilon <= r.claimed_epsilon, r
    at4 = [r for r in rep if r.config["target_epsilon"] == 4.0][0]
    # the assumption-free Clopper-Pearson bound gets close to half the claim at eps = 4 with 40 000 runs per side
    # (measured 1.95 of 3.98 = 0.49 on seed 0; it needs ~2x more runs to pass 0.5 reliably)
    assert (
        at4.others[0].method == "clopper_pearson"
        and at4.others[0].epsilon >= 0.4 * at4.claimed_epsilon
    )
