"""Every registry entry is complete: docstring citing its paper, a claim, a card folder; the
top-level card folders are 1:1 with the registries; generated cards come from report files."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from privnlp.core import Attack, Mechanism, PrivacyClaim
from privnlp.core.registry import ATTACKS, LEAKY_TWINS, MECHANISMS, SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


def test_all_registering_modules_import():
    for reg in (MECHANISMS, ATTACKS, SCENARIOS, LEAKY_TWINS):
        reg.load_all()
        assert reg.import_errors == {}, f"{reg.kind} modules failed to import: {reg.import_errors}"


def test_registries_are_not_empty():
    assert MECHANISMS.names() and ATTACKS.names()


@pytest.mark.parametrize("name", MECHANISMS.names())
def test_mechanism_entry_is_complete(name):
    cls = MECHANISMS.get(name)
    assert issubclass(cls, Mechanism)
    doc = inspect.getdoc(cls) or ""
    assert len(doc) > 40, f"{name}: docstring must explain the mechanism and cite its paper"
    assert cls.paper, f"{name}: `paper` must name the paper it implements"
    claim = cls.example("quick").claim()
    assert isinstance(claim, PrivacyClaim), f"{name}: claim() must return a PrivacyClaim"
    for a in cls.paired_attacks:
        assert a in ATTACKS.names(), f"{name}: paired attack {a!r} is not registered"
    assert (ROOT / "cards" / "mechanisms" / name / "README.md").exists(), (
        f"cards/mechanisms/{name}/README.md missing"
    )


@pytest.mark.parametrize("name", ATTACKS.names())
def test_attack_entry_is_complete(name):
    cls = ATTACKS.get(name)
    assert issubclass(cls, Attack)
    assert len(inspect.getdoc(cls) or "") > 40 and cls.paper, f"{name}: docstring + paper required"
    assert cls.headline_metric, f"{name}: headline_metric (higher = more leakage) required"
    assert cls.threat_model is not None, f"{name}: threat_model required"
    assert (ROOT / "cards" / "attacks" / name / "README.md").exists(), (
        f"cards/attacks/{name}/README.md missing"
    )


def test_card_folders_match_registries_one_to_one():
    for folder, reg in (("mechanisms", MECHANISMS), ("attacks", ATTACKS)):
        dirs = {p.name for p in (ROOT / "cards" / folder).iterdir() if p.is_dir()}
        assert dirs == set(reg.names()), (
            f"cards/{folder}/ folders != registry: extra {dirs - set(reg.names())}, "
            f"missing {set(reg.names()) - dirs}"
        )
        assert not list((ROOT / "cards" / folder).rglob("__init__.py")), (
            f"cards/{folder}/ must not be importable"
        )


def test_leaky_twins_imitate_registered_mechanisms():
    for name in LEAKY_TWINS.names():
        assert name in MECHANISMS.names(), f"leaky twin registered for unknown mechanism {name!r}"


@pytest.mark.parametrize("name", MECHANISMS.names())
def test_every_defense_has_a_leaky_twin(name):
    twin = LEAKY_TWINS.get(name)
    assert issubclass(twin, MECHANISMS.get(name)), (
        f"{name}: the leaky twin must subclass the mechanism"
    )
    assert len(inspect.getdoc(twin) or "") > 40, f"{name}: the twin's docstring must state its bug"


#: defenses whose twin is caught by its behavioural test (tests/memorization/test_twins_embedding.py)
#: but not by the quick-preset attack numbers: at this scale the real defense does not reduce the
#: eavesdropping / watermark leakage either (the paper: VAT does not help, may even increase leakage; README,
#: "Known limitations"); its card shows all three systems
TWIN_SEEN_BY_BEHAVIOURAL_TEST_ONLY: frozenset[str] = frozenset({"adversarial_embedding"})


@pytest.mark.parametrize("name", MECHANISMS.names())
def test_generated_card_numbers_come_from_its_report(name):
    from privnlp.core.report import LeakageReport
    from privnlp.evaluation.cards import card_text

    folder = ROOT / "cards" / "mechanisms" / name
    rep = folder / "report.json"
    assert rep.exists(), (
        f"cards/mechanisms/{name}/report.json missing: run `privnlp evaluate --defense {name} --cards`"
    )
    report = LeakageReport.load(rep)
    expected = card_text(name, report, folder)
    assert (folder / "README.md").read_text() == expected, (
        f"cards/mechanisms/{name}/README.md was edited by hand or is stale"
    )
    for f in report.figures:
        assert (folder / f"{name}-{f.name}.png").exists()
    # a leaky twin must be reported as leaking more than the real defense by the paired attacks
    heads = report.headline()
    twins = [v for v in heads.values() if "leaky_twin" in v and "defended" in v]
    assert twins, f"{name}: the card's report must measure the leaky twin"
    if name not in TWIN_SEEN_BY_BEHAVIOURAL_TEST_ONLY:
        assert any(v["leaky_twin"] > v["defended"] for v in twins), (
            f"{name}: leaky twin not caught: {heads}"
        )
