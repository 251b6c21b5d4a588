"""The hand-written sets that were scored and read in earlier rounds (``test.txt``, ``test_fresh.txt`` and,
since issue 32's fourth round, ``test_blind.txt``, scored once blind by the lead in the third) are development
data now: they parse, share no text with each other, no training path opens them, and the confidence
calibration (fitted on ``validation.txt`` only) opens none of them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from privnlp.mechanisms.pii.evalset import default_evalset_dir, load_evalset, parse_evalset

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FRESH = default_evalset_dir() / "test_fresh.txt"
#: sets no training path may read (all development data now: tuning rules on them is allowed)
NOT_FOR_TRAINING = (
    "test.txt",
    "test_fresh.txt",
    "test_blind.txt",
    "test_blind4.txt",
    "test_blind5.txt",
    "test_blind6.txt",
)


def _fresh():
    return parse_evalset(FRESH.read_text(encoding="utf-8"), "test_fresh")


def test_fresh_set_parses_and_is_large_enough():
    docs = _fresh()
    assert len(docs) >= 100
    assert sum(len(d.gold) for d in docs) >= 350
    assert len({d.kind for d in docs}) >= 8 and len({d.locale for d in docs}) >= 10
    for d in docs:
        assert d.text and "[[" not in d.text and "]]" not in d.text
        for a, b, t in d.gold:
            item = d.text[a:b]
            assert item and item == item.strip(), (d.id, item)
            assert t.isupper()
    others = {d.text for d in load_evalset("test") + load_evalset("validation")}
    assert not {d.text for d in docs} & others


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    """Every file opened while the CRF tagger is trained (small) and calibrated: (training, tuning)."""
    from privnlp.mechanisms.pii import crf

    seen: list[str] = []
    state = {"on": False}

    def hook(event, args):
        if state["on"] and event == "open" and args and isinstance(args[0], (str, bytes)):
            seen.append(str(args[0]))

    sys.addaudithook(hook)
    state["on"] = True
    try:
        path = tmp_path_factory.mktemp("crf") / "m.crfsuite"
        tagger = crf.train_crf_tagger(40, rng=0, path=path, max_iterations=5)
        training = list(seen)
        tagger.calibration = crf.calibrate(tagger, load_evalset("validation"))
    finally:
        state["on"] = False
    assert training, "the hook saw no file at all"
    return training, list(seen)


@pytest.mark.parametrize("name", NOT_FOR_TRAINING)
def test_no_training_path_reads_the_set(opened, name):
    training, _ = opened
    assert not any(p.endswith(name) for p in training)


def test_no_training_path_reads_any_hand_written_file(opened):
    """No file of the hand-written sets' folder at all (a set added later, written blind, included) is
    opened while the tagger's corpus is built and the tagger trained (issue 32, fifth round)."""
    training, _ = opened
    folder = str(default_evalset_dir().resolve())
    assert not [p for p in training if str(Path(p).resolve()).startswith(folder)]


@pytest.mark.parametrize("name", NOT_FOR_TRAINING)
def test_the_calibration_reads_no_scored_set(opened, name):
    """The calibration map is fitted on ``validation.txt`` alone: no scored set is opened while it is fitted."""
    _, everything = opened
    assert not any(p.endswith(name) for p in everything)


def test_the_dev_analysis_refuses_other_sets():
    src = (default_evalset_dir() / "analyse_dev.py").read_text(encoding="utf-8")
    assert 'DEV_SETS = ("validation", "test", "test_fresh", "test_blind")' in src
