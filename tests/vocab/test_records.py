"""Issue 28 item 6: a DP vocabulary's documents end only where the file format says a record ends.

The per-document contribution bound behind the (epsilon, delta) claim holds for documents as the
loader cuts them; ``str.splitlines()`` also cut at form feeds (GPL-1, LGPL-2 and LGPL-2.1 hold them),
U+2028 and other separators, so one document counted as several contributors. The adversary here is
the data owner's neighbour: a word of one document must count for exactly one contributor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from privnlp.cli.main import app
from privnlp.core.errors import InvalidArgument, MalformedInput
from privnlp.data.loaders import TXT_UNIT_RULES, load_texts, split_records
from privnlp.mechanisms.vocab import DPWordPiece, bound_contributions, contributor_histogram
from privnlp.mechanisms.vocab import wordpiece as wp_mod

SEPARATORS = ["\f", "\v", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"]


@pytest.mark.parametrize("sep", SEPARATORS)
def test_txt_line_records_never_split_inside_a_line(tmp_path, sep):
    p = tmp_path / "c.txt"
    p.write_text(f"alpha secret {sep} secret beta\nsecond document\r\nthird\n", encoding="utf-8")
    texts = load_texts(p)
    assert texts == [f"alpha secret {sep} secret beta", "second document", "third"]
    # the adversary's check: "secret" is one contributor's word, however often it appears
    ws = wp_mod._split_corpus(texts, None, True)
    assert contributor_histogram(bound_contributions(ws, 32, rng=0))["secret"] == 1


def test_license_with_form_feeds_is_one_document_per_line(tmp_path):
    """A .txt of 30 documents, each a line holding form feeds (as the LGPL does), loads as 30."""
    docs = [f"page one of licence {i}\fpage two of licence {i}\f\fend {i}" for i in range(30)]
    p = tmp_path / "lic.txt"
    p.write_text("\n".join(docs) + "\n", encoding="utf-8")
    assert len("\n".join(docs).splitlines()) > 30  # what the old loader did
    assert load_texts(p) == docs


def test_paragraph_and_file_rules(tmp_path):
    text = "first para\nstill first\f\n\n  \nsecond\u2028para\r\n\r\nthird\n"
    assert split_records(text, "paragraph") == [
        "first para\nstill first\f",
        "second\u2028para",
        "third",
    ]
    assert split_records(text, "file") == [text.rstrip("\n")]
    assert split_records(text, "line") == [
        "first para",
        "still first\f",
        "second\u2028para",
        "third",
    ]
    with pytest.raises(InvalidArgument, match="unit must be one of"):
        split_records(text, "page")
    p = tmp_path / "c.txt"
    p.write_text(text, encoding="utf-8")
    assert load_texts(p, txt_unit="paragraph")[1] == "second\u2028para"
    with pytest.raises(InvalidArgument, match="txt_unit"):
        load_texts(p, txt_unit="sentence")


def test_jsonl_raw_u2028_is_valid_and_one_record(tmp_path):
    p = tmp_path / "c.jsonl"
    rec = {"text": "one\u2028record\u2029with\x85separators\fand a form feed"}
    p.write_text(json.dumps(rec, ensure_ascii=False) + "\r\n" + '{"text": "two"}\n', "utf-8")
    assert "\u2028" in p.read_text("utf-8")  # raw, not escaped
    assert load_texts(p) == [rec["text"], "two"]


def _build(tmp_path: Path, corpus: Path, *extra: str):
    out = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
    r = CliRunner().invoke(
        app,
        ["vocab", "build", str(corpus), "--out", str(out), "--epsilon", "4", "--delta", "1e-4"]
        + ["--k", "16", "--vocab-size", "200", "--seed", "0", *extra],
    )
    return r, out


def test_cli_counts_documents_by_the_rule_and_states_it(tmp_path):
    docs = [f"page one of licence number {i}\fpage two\fend" for i in range(30)]
    p = tmp_path / "lic.txt"
    p.write_text("\n".join(docs) + "\n", encoding="utf-8")
    r, out = _build(tmp_path, p)
    assert r.exit_code == 0, r.output
    hist = json.loads((out / "histogram.json").read_text())
    assert hist["n_contributors"] == 30
    claim = json.loads((out / "claim.json").read_text())["claim"]
    assert any(TXT_UNIT_RULES["line"] in n for n in claim["notes"])
    assert claim["noise_seeded"] is True  # --seed: a reproducible simulation, said so
    r, out = _build(tmp_path, p, "--txt-unit", "file")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "histogram.json").read_text())["n_contributors"] == 1


def test_cli_user_field_types_and_unit(tmp_path):
    p = tmp_path / "u.jsonl"
    good = [{"text": f"doc {i} words\u2028more", "user": f"u{i % 3}"} for i in range(12)]
    p.write_text("\n".join(json.dumps(g, ensure_ascii=False) for g in good) + "\n", "utf-8")
    r, out = _build(tmp_path, p, "--unit", "user", "--user-field", "user")
    assert r.exit_code == 0, r.output
    assert json.loads((out / "histogram.json").read_text())["n_contributors"] == 3
    # --user-field without --unit user was silently ignored
    r, _ = _build(tmp_path, p, "--user-field", "user")
    assert r.exit_code == 2 and "--unit user" in r.output
    for bad_text, what in ((None, "null"), (3, "int"), (["a", "b"], "list")):
        p.write_text(json.dumps({"text": bad_text, "user": "a"}) + "\n", "utf-8")
        r, out = _build(tmp_path, p, "--unit", "user", "--user-field", "user")
        assert r.exit_code == 2 and "line 1" in r.output and what in r.output, r.output
        assert not (out / "tokenizer.json").exists()
    for bad_user, what in ((["a"], "list"), (None, "null"), ({"id": 1}, "dict"), (1.5, "float")):
        p.write_text(json.dumps({"text": "fine text", "user": bad_user}) + "\n", "utf-8")
        r, out = _build(tmp_path, p, "--unit", "user", "--user-field", "user")
        assert r.exit_code == 2 and "user id" in r.output and what in r.output, r.output
        assert "Traceback" not in r.output


def test_tokenizer_json_has_a_pad_token(tmp_path):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    texts = [f"the patient number {i} was seen by doctor {i % 4}" for i in range(40)]
    res = DPWordPiece(8.0, 1e-3, 16, vocab_size=200).build(texts, rng=0)
    paths = res.save(tmp_path)
    for tok in (
        PreTrainedTokenizerFast(tokenizer_file=str(paths["tokenizer"])),
        AutoTokenizer.from_pretrained(str(tmp_path)),
    ):
        assert tok.pad_token == "[PAD]" and tok.pad_token_id == 0
        batch = tok(["the patient", "the patient was seen"], padding=True)
        assert len(batch["input_ids"][0]) == len(batch["input_ids"][1])
        assert batch["input_ids"][0][-1] == 0


def test_bad_records_argument():
    with pytest.raises(MalformedInput):
        DPWordPiece(1.0, 1e-3, 4).build([""], rng=0)
