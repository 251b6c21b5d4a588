"""The hand-written sets that were scored and read in earlier rounds (``test.txt``, ``test_fresh.txt`` and,
since issue 32's fourth round, ``test_blind.txt``, scored once blind by the lead in the third) are development
data now: they parse, share no text with each other, and no training path opens them. The confidence
calibration (a tuning path) is fitted, since the seventh round, on ``validation.txt`` and the blind sets read
in earlier rounds: it opens those files and no other (never ``test.txt``, never a set added later)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from privnlp.mechanisms.pii.evalset import (
    HELD_OUT_SCORES,
    default_evalset_dir,
    held_out_markdown,
    load_evalset,
    parse_evalset,
)

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
    "test_blind7.txt",
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


def test_the_calibration_reads_its_pool_and_nothing_else(tmp_path, monkeypatch):
    """The bundled tagger's calibration (``crf_tagger``'s refit, the real path) opens exactly the files of
    ``CALIBRATION_SETS`` in the hand-written folder: never ``test.txt`` (where the card reports the
    calibration) nor any set that is not listed (one added later, written blind)."""
    from privnlp.mechanisms.pii import crf
    from privnlp.mechanisms.pii.evalset import CALIBRATION_SETS

    assert "test" not in CALIBRATION_SETS and "validation" in CALIBRATION_SETS
    monkeypatch.setenv("PRIVNLP_CACHE_DIR", str(tmp_path / "cache"))
    model = crf.train_crf_tagger(30, rng=0, path=tmp_path / "m.crfsuite", max_iterations=3)

    def fake_train(n_docs, *, rng, path, clusters=None):
        model.save(path)
        return crf.CRFTagger.load(path)

    fitted: list[int] = []

    def fake_calibrate(tagger, docs):  # what matters here is which files were read, not the fit
        fitted.append(len(docs))
        return (1.0, 0.0, 0.0)

    monkeypatch.setattr(crf, "train_crf_tagger", fake_train)
    monkeypatch.setattr(crf, "calibrate", fake_calibrate)
    seen: list[str] = []
    state = {"on": True}

    def hook(event, args):
        if state["on"] and event == "open" and args and isinstance(args[0], (str, bytes)):
            seen.append(str(args[0]))

    sys.addaudithook(hook)
    try:
        crf.crf_tagger()
    finally:
        state["on"] = False
    folder = default_evalset_dir().resolve()
    read = {Path(p).resolve().name for p in seen if Path(p).resolve().parent == folder}
    assert read == {f"{n}.txt" for n in CALIBRATION_SETS}
    assert fitted and fitted[0] == sum(
        len(parse_evalset((folder / f"{n}.txt").read_text(encoding="utf-8")))
        for n in CALIBRATION_SETS
    )


def test_the_dev_analysis_refuses_other_sets():
    src = (default_evalset_dir() / "analyse_dev.py").read_text(encoding="utf-8")
    # every set scored once and read since (the seventh round added the fourth to seventh blind sets); a set
    # written blind later is not a development set until it has been scored
    assert (
        'DEV_SETS = (\n    "validation",\n    "test",\n    "test_fresh",\n    "test_blind",\n'
        in src
    )
    assert (
        '    "test_blind4",\n    "test_blind5",\n    "test_blind6",\n    "test_blind7",\n)' in src
    )


def test_held_out_table_matches_the_sets_and_is_on_the_card():
    """The card's held-out table (``HELD_OUT_SCORES``) names sets that exist with the stated texts and items, and the
    committed card shows every row."""
    card = (
        default_evalset_dir().parents[1] / "cards" / "mechanisms" / "pii_redaction" / "README.md"
    ).read_text(encoding="utf-8")
    for row in held_out_markdown()[4:-1]:
        assert row in card, row
    for name, n_texts, n_items, *_ in HELD_OUT_SCORES:
        docs = parse_evalset((default_evalset_dir() / name).read_text(encoding="utf-8"), name)
        assert (len(docs), sum(len(d.gold) for d in docs)) == (n_texts, n_items), name
