"""The empirical DP audit of every DP defense (privnlp/auditing): the real mechanism's audited epsilon stays at
or below its claim, and every leaky twin that breaks DP is caught with an audited epsilon above the claim.

Papers: Nasr et al. 2021 (white-box Dirac canaries), Jagielski et al. 2020 (Clopper-Pearson), Steinke, Nasr &
Jagielski 2023 and Mahloujifar, Melis & Chaudhuri 2025 (one run); the mechanisms' papers are cited in each
audit module.

Quick preset, seed 0 (seeded: deterministic). Measured (2 cores, lightly loaded): dp_sgd ~0.9 of the claim
(GDP bound), twin (no clipping) > 7x the claim; dp_fedavg 0.86 (3.38 of 3.95: the claim is the server's
analytic Gaussian since issue 28, 0.74 with the older RDP claim), twin (unclipped weighted mean)
> 6x; dp_wordpiece ~0.9 (k = 1), twin (occurrence counts) ~3x; the four metric-DP mechanisms 0.75-0.93 per
unit of the metric, twins 1.1-5x. Tolerance: the defense must not exceed its claim at all, and must reach a
stated fraction of it (so that an audit that silently stops working fails); the twins must exceed it.
The repeated-seed check is in test_audits_slow.py.
"""

from __future__ import annotations

import math

import pytest

from privnlp.auditing import DPAuditSuite, run_dp_audit
from privnlp.auditing.render import audit_card_lines, audit_index_text
from privnlp.auditing.runner import audit_report
from privnlp.core.claims import ClaimKind
from privnlp.core.registry import AUDITS, LEAKY_TWINS, MECHANISMS
from privnlp.core.report import LeakageReport

DP_DEFENSES = (
    "dp_sgd",
    "dp_fedavg",
    "dp_wordpiece",
    "laplace_metric",
    "vickrey",
    "vickrey_k",
    "mahalanobis",
)
#: the fraction of the claim that the quick audit of the real mechanism must reach (measured - margin)
MIN_RATIO = {
    "dp_sgd": 0.6,
    "dp_fedavg": 0.7,
    "dp_wordpiece": 0.7,
    "laplace_metric": 0.7,
    "vickrey": 0.7,
    "vickrey_k": 0.6,
    "mahalanobis": 0.7,
}


@pytest.fixture(scope="session")
def audit_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("dp-audit-cache")


@pytest.fixture(scope="session")
def suites(audit_cache) -> dict[str, DPAuditSuite]:
    return {n: run_dp_audit(n, preset="quick", seed=0, cache_dir=audit_cache) for n in DP_DEFENSES}


def test_every_dp_claim_has_an_audit():
    """Every registered defense with a DP / metric-DP claim has a registered audit (and a leaky twin)."""
    for n in MECHANISMS.names():
        if n in DP_DEFENSES:
            assert n in AUDITS.names() and n in LEAKY_TWINS.names()
    assert set(AUDITS.names()) == set(DP_DEFENSES)
    for n in (
        "dp_sgd",
        "dp_wordpiece",
        "vickrey",
    ):  # cheap claims; the others are checked in the audits
        assert MECHANISMS.get(n).example("quick").claim().kind in (
            ClaimKind.DP,
            ClaimKind.METRIC_DP,
        )


@pytest.mark.parametrize("name", DP_DEFENSES)
def test_defense_audited_at_most_claimed(suites, name):
    rs = suites[name].of("defense")
    assert rs, f"{name}: no audit of the defense"
    for r in rs:
        for b in (r.audited, *r.others):
            assert b.epsilon <= r.claimed_epsilon, (
                f"{name}: audited {b.epsilon} > claimed {r.claimed_epsilon} ({r.variant})"
            )
        assert r.audited.confidence == 0.95 and r.audited.trials > 0
    head = suites[name].headline
    assert head.ratio >= MIN_RATIO[name], (
        f"{name}: audit too weak: {head.audited.epsilon} of {head.claimed_epsilon}"
    )


@pytest.mark.parametrize("name", DP_DEFENSES)
def test_leaky_twin_claim_violated(suites, name):
    rs = suites[name].of("leaky_twin")
    assert rs, f"{name}: its leaky twin was not audited"
    head = rs[0]
    assert head.violated and head.audited.epsilon > head.claimed_epsilon, (
        f"{name}: twin {head.implementation} not caught: audited {head.audited.epsilon} <= {head.claimed_epsilon}"
    )
    assert head.implementation.endswith(LEAKY_TWINS.get(name).__qualname__)


def test_dp_sgd_one_run_variant(suites):
    one = [r for r in suites["dp_sgd"].of("defense") if "one run" in r.variant]
    assert len(one) == 1
    r = one[0]
    methods = {r.audited.method, *(o.method for o in r.others)}
    assert methods == {"fdp_gaussian_one_run", "steinke_one_run"}
    assert 0 < r.audited.epsilon <= r.claimed_epsilon
    ideal = r.config["ideal_gaussian_same_setting"]
    assert set(ideal) == {"fdp_gaussian_one_run", "steinke_one_run"}
    twin_one = [r for r in suites["dp_sgd"].of("leaky_twin") if "one run" in r.variant][0]
    assert twin_one.violated


def test_report_card_and_index(suites, audit_cache):
    """audit_report fills empirical_epsilon_lower_bound; the card section and the index line render from the
    report alone (JSON round trip), with the twin's claim violation spelled out."""
    from privnlp.evaluation.cards import render_mechanism_card

    name = "vickrey"
    rep = LeakageReport(
        mechanism=name,
        claim=MECHANISMS.get(name).example("quick").claim(),
        threat_models=(),
        attacks=(),
        config={"preset": "quick"},
    )
    rep = audit_report(rep, name, preset="quick", seed=0, cache_dir=audit_cache)  # cached: instant
    head = suites[name].headline
    assert rep.empirical_epsilon_lower_bound == pytest.approx(head.audited.epsilon)
    back = LeakageReport.from_dict(rep.to_dict())
    lines = audit_card_lines(back)
    text = "\n".join(lines)
    assert (
        "## Empirical DP audit" in text and "claim violated" in text and "audited / claimed" in text
    )
    assert f"{head.audited.epsilon:.3g}" in text
    card = render_mechanism_card(back)
    assert "## Empirical DP audit" in card
    assert "audited ε ≥" in audit_index_text(back) and "claim violated" in audit_index_text(back)
    # a report without an audit renders as before
    plain = LeakageReport(mechanism=name, claim=rep.claim, threat_models=(), attacks=())
    assert audit_card_lines(plain) == [] and audit_index_text(plain) == ""
    # no audit registered: unchanged
    other = LeakageReport(mechanism="sign_sgd", claim=rep.claim, threat_models=(), attacks=())
    assert audit_report(other, "sign_sgd") is other


def test_suite_roundtrip(suites):
    s = suites["dp_wordpiece"]
    back = DPAuditSuite.from_dict(s.to_dict())
    assert back.headline.audited.epsilon == s.headline.audited.epsilon
    assert [r.violated for r in back.results] == [r.violated for r in s.results]
    assert not math.isnan(back.headline.ratio)


def test_cli_has_audit_flag():
    from typer.testing import CliRunner

    from privnlp.cli.evaluate import app

    out = CliRunner().invoke(app, ["--help"])
    assert out.exit_code == 0 and "--audit-dp" in out.output
