"""The second, blind hand-written test set (issue 32): ``benchmarks/pii_eval/test_fresh.txt`` parses, is
large enough, shares no text with the other sets, and no training or tuning path opens it."""

from __future__ import annotations

import sys

import pytest

from privnlp.mechanisms.pii.evalset import default_evalset_dir, load_evalset, parse_evalset

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FRESH = default_evalset_dir() / "test_fresh.txt"


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


def test_no_training_path_reads_the_fresh_set(tmp_path):
    """Train the CRF tagger (small) and calibrate it with every file open recorded: the fresh set is never
    opened (nor the test split)."""
    from privnlp.mechanisms.pii import crf

    opened: list[str] = []
    state = {"on": False}

    def hook(event, args):
        if state["on"] and event == "open" and args and isinstance(args[0], (str, bytes)):
            opened.append(str(args[0]))

    sys.addaudithook(hook)
    state["on"] = True
    try:
        tagger = crf.train_crf_tagger(40, rng=0, path=tmp_path / "m.crfsuite", max_iterations=5)
        tagger.calibration = crf.calibrate(tagger, load_evalset("validation"))
    finally:
        state["on"] = False
    assert opened, "the hook saw no file at all"
    assert not any(p.endswith(("test_fresh.txt", "test.txt")) for p in opened)


def test_the_validation_error_analysis_never_names_the_fresh_set():
    src = (default_evalset_dir() / "analyse_validation.py").read_text(encoding="utf-8")
    assert "fresh" not in src
