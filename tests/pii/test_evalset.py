"""The hand-written evaluation set (issue 32, item 3): its format, its scoring, and that no training or
tuning path reads the test split."""

from __future__ import annotations

import sys

import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.pii.evalset import (
    default_evalset_dir,
    load_evalset,
    parse_evalset,
    score_spans,
)
from privnlp.mechanisms.pii.types import PIISpan

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_sets_are_large_enough_and_well_formed():
    test, val = load_evalset("test"), load_evalset("validation")
    assert len(test) >= 100 and len(val) >= 100  # 24 + 96 written in issue 32's second round
    assert len({d.locale for d in val}) >= 15 and len({d.kind for d in val}) >= 10
    kinds = {d.kind for d in test}
    assert kinds == {"ticket", "cv", "label", "notes", "log", "email", "form", "chat"}
    assert len({d.locale for d in test}) >= 8
    for d in test + val:
        for a, b, t in d.gold:
            item = d.text[a:b]
            assert item == item.strip() and item, (d.id, item)
            assert t.isupper()
    assert not {d.text for d in test} & {d.text for d in val}


def test_parse_and_score():
    docs = parse_evalset("### chat en_GB\nhi [[PERSON:Ann]], mail [[EMAIL:a@b.org]].\n", "x")
    assert docs[0].text == "hi Ann, mail a@b.org." and docs[0].gold == (
        (3, 6, "PERSON"),
        (13, 20, "EMAIL"),
    )
    t = docs[0].text
    perfect = score_spans(docs, [[PIISpan(3, 6, "PERSON"), PIISpan(13, 20, "EMAIL")]])
    assert perfect.recall == perfect.precision == perfect.kept_words == 1.0
    # a span that swallows a non-PII word is wrong, and the word is lost
    greedy = score_spans(docs, [[PIISpan(0, 6, "PERSON"), PIISpan(13, 20, "EMAIL")]])
    assert greedy.recall == 1.0 and greedy.precision == 0.5 and greedy.kept_words < 1.0
    # the wrong type still redacts (recall) but not typed recall
    typed = score_spans(docs, [[PIISpan(3, 6, "LOC"), PIISpan(13, 20, "EMAIL")]])
    assert typed.recall == 1.0 and typed.typed_recall == 0.5
    missed = score_spans(docs, [[PIISpan(13, 20, "EMAIL")]])
    assert missed.recall == 0.5 and missed.missed == (("x-001", "PERSON", "Ann"),)
    assert "| PERSON |" in missed.table() and t
    with pytest.raises(InvalidArgument, match="split"):
        load_evalset("train")


def test_no_training_path_reads_the_test_split(tmp_path, monkeypatch):
    """Train the CRF tagger (small) and calibrate it with every file open recorded: the test split is
    never opened, the validation split only by the calibration."""
    from privnlp.mechanisms.pii import crf

    test_file = str(default_evalset_dir() / "test.txt")
    val_file = str(default_evalset_dir() / "validation.txt")
    opened: list[str] = []
    state = {"on": False}

    def hook(event, args):
        if state["on"] and event == "open" and args and isinstance(args[0], (str, bytes)):
            opened.append(str(args[0]))

    sys.addaudithook(hook)
    state["on"] = True
    try:
        tagger = crf.train_crf_tagger(40, rng=0, path=tmp_path / "m.crfsuite", max_iterations=5)
        training_opens = list(opened)
        tagger.calibration = crf.calibrate(tagger, load_evalset("validation"))
    finally:
        state["on"] = False
    assert training_opens, "the hook saw no file at all"
    assert not any(p.endswith(("test.txt", "validation.txt")) for p in training_opens)
    assert test_file not in opened and val_file in opened


def test_the_validation_error_analysis_never_loads_the_test_split():
    import ast

    src = (default_evalset_dir() / "analyse_validation.py").read_text(encoding="utf-8")
    tree = ast.parse(src)
    doc = tree.body[0].value.value  # the module docstring may name test.txt
    consts = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value != doc
    ]
    assert "validation" in consts
    assert not any("test" in c for c in consts)  # no "test" split, no test.txt path
