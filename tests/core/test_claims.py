import math

import numpy as np
import pytest

from privnlp.core import (
    Adversary,
    ClaimKind,
    InvalidArgument,
    InvalidPrivacyParameter,
    PrivacyClaim,
    ThreatModel,
    check_positive,
    check_probability,
    check_range,
    rng,
)


def test_dp_claim_statement_and_roundtrip():
    c = PrivacyClaim.dp(
        1.5,
        1e-5,
        "record",
        accountant="prv",
        neighbouring="add/remove",
        extra={"epsilon_no_amplification": 9.0},
    )
    s = c.statement()
    assert (
        "(1.5, 1e-05)-DP at the record level" in s
        and "prv" in s
        and "epsilon_no_amplification=9" in s
    )
    assert PrivacyClaim.from_dict(c.to_dict()) == c


def test_infinite_epsilon_roundtrip():
    c = PrivacyClaim.dp(math.inf, 1e-5, "user")
    assert c.to_dict()["epsilon"] == "inf"
    assert math.isinf(PrivacyClaim.from_dict(c.to_dict()).epsilon)


@pytest.mark.parametrize("eps,delta", [(-1.0, 1e-5), (1.0, 1.0), (1.0, -0.1), (float("nan"), 0.0)])
def test_invalid_dp_claims(eps, delta):
    with pytest.raises(InvalidPrivacyParameter, match="epsilon|delta"):
        PrivacyClaim.dp(eps, delta, "record")


def test_claim_kinds_never_silently_empty():
    assert PrivacyClaim.heuristic("no formal guarantee").kind == ClaimKind.HEURISTIC
    assert "no privacy protection" in PrivacyClaim.none().statement()
    with pytest.raises(InvalidPrivacyParameter, match="metric"):
        PrivacyClaim(ClaimKind.METRIC_DP, epsilon=1.0, unit="word")
    assert "metric DP" in PrivacyClaim.metric_dp(5.0, "euclidean").statement()


def test_threat_model_roundtrip():
    t = ThreatModel(
        Adversary.EAVESDROPPER, observes=("gradients",), knows=("model",), goal="recover text"
    )
    assert ThreatModel.from_dict(t.to_dict()) == t
    assert "eavesdropper" in t.describe()


def test_check_range_messages():
    with pytest.raises(InvalidArgument, match=r"t must be in \[0.0, 1.0\]; got 2"):
        check_range("t", 2, 0.0, 1.0)
    with pytest.raises(InvalidArgument, match=r"epsilon must be in \(0.0, inf\)"):
        check_positive("epsilon", 0)
    with pytest.raises(InvalidArgument, match="p must be"):
        check_probability("p", 1.5)
    assert check_range("k", 3, 1, integer=True) == 3
    with pytest.raises(InvalidArgument, match="integer"):
        check_range("k", 2.5, 1, integer=True)


def test_rng_helpers_require_explicit_rng():
    with pytest.raises(InvalidArgument, match="rng is required"):
        rng.as_numpy(None)
    a = rng.as_numpy(3).integers(0, 1000, 5)
    b = rng.as_numpy(np.random.default_rng(3)).integers(0, 1000, 5)
    assert (a == b).all()
    kids = rng.spawn(0, 3)
    assert len({int(k.integers(0, 2**62)) for k in kids}) == 3


def test_secure_mode_refuses_seeded_generators():
    with pytest.raises(InvalidArgument, match="secure mode"):
        rng.refuse_seeded(np.random.default_rng(0))
    g = rng.secure_numpy()
    assert rng.refuse_seeded(g) is g
    # two secure generators differ (seeded from the OS)
    assert rng.secure_numpy().integers(0, 2**62) != rng.secure_numpy().integers(0, 2**62)


def test_disk_lease_deletes_snapshot_dir_with_last_observation(tmp_path):
    import gc

    from privnlp.core import ModelSnapshots
    from privnlp.core.observations import DiskLease

    d = tmp_path / "snaps"
    d.mkdir()
    (d / "round0.pt").write_bytes(b"x")
    lease = DiskLease(str(d))
    a = ModelSnapshots(
        paths=(str(d / "round0.pt"),),
        selection=((),),
        model_factory=lambda: None,
        meta={"_lease": lease},
    )
    b = ModelSnapshots(
        paths=a.paths, selection=a.selection, model_factory=a.model_factory, meta={"_lease": lease}
    )
    del lease, a
    gc.collect()
    assert d.exists(), "still in use by b"
    del b
    gc.collect()
    assert not d.exists()


def test_adversary_bounds_from_threat_models_round_trip():
    from privnlp.core.claims import AdversaryBound

    tms = (
        ThreatModel(Adversary.HONEST_BUT_CURIOUS_SERVER, observes=("every noisy update",)),
        ThreatModel(Adversary.BLACK_BOX_QUERIER, observes=("log-probabilities", "outputs")),
    )
    bounds = AdversaryBound.same_for(tms, 1.5, 1e-5, "dp_accounting PLD", True)
    assert [b.adversary for b in bounds] == ["honest-but-curious server", "black-box querier"]
    assert bounds[1].observes == "log-probabilities, outputs"
    c = PrivacyClaim.dp(1.5, 1e-5, "example", adversaries=bounds)
    assert PrivacyClaim.from_dict(c.to_dict()) == c
    # one guarantee for every adversary: no adversary is singled out as "the strongest"
    assert c.headline() == "(1.5, 1e-05)-DP per example against every named adversary"
    weaker = (bounds[0], AdversaryBound("black-box querier", "outputs", 0.5, 1e-5, "x", True))
    assert (
        PrivacyClaim.dp(1.5, 1e-5, "example", adversaries=weaker).headline()
        == "(1.5, 1e-05)-DP per example against the honest-but-curious server "
        "(the strongest named adversary)"
    )
    with pytest.raises(InvalidPrivacyParameter, match="delta of the bound"):
        AdversaryBound("x", "y", 1.0, 1.0, "a", False)
    with pytest.raises(InvalidPrivacyParameter, match="epsilon of the bound"):
        AdversaryBound("x", "y", float("nan"), 0.0, "a", False)
