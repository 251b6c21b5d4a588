"""The hand-written sets that were scored and read in earlier rounds (``test.txt``, ``test_fresh.txt``) are
development data now (issue 32, third round): they parse, share no text with each other, and -- like the
held-out blind set ``test_blind.txt`` the lead scores once at the end -- no training path opens them; no
tuning path (calibration, the error analyses) opens or names the blind set."""

from __future__ import annotations

import ast
import sys

import pytest

from privnlp.mechanisms.pii.evalset import default_evalset_dir, load_evalset, parse_evalset

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FRESH = default_evalset_dir() / "test_fresh.txt"
#: sets no training path may read (the first two are development data now: tuning rules on them is allowed)
NOT_FOR_TRAINING = ("test.txt", "test_fresh.txt", "test_blind.txt")
#: held-out sets: neither training nor any tuning path (calibration, error analysis) may read or name them
HELD_OUT = ("test_blind.txt",)


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


@pytest.mark.parametrize("name", HELD_OUT)
def test_no_tuning_path_reads_or_names_a_held_out_set(opened, name):
    """Calibration never opens the held-out set, and neither error-analysis script names it (their
    docstrings may say it exists; no string the code uses does)."""
    _, everything = opened
    assert not any(p.endswith(name) for p in everything)
    stem = name.removesuffix(".txt")
    for script in ("analyse_validation.py", "analyse_dev.py"):
        tree = ast.parse((default_evalset_dir() / script).read_text(encoding="utf-8"))
        doc = ast.get_docstring(tree, clean=False)
        consts = [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value != doc
        ]
        assert consts, script
        assert not any(stem in c or "blind" in c for c in consts), script


def test_the_dev_analysis_refuses_other_sets():
    src = (default_evalset_dir() / "analyse_dev.py").read_text(encoding="utf-8")
    assert 'DEV_SETS = ("validation", "test", "test_fresh")' in src
