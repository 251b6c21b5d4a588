"""Issue 31 item 5: --redact-pii before the perturbation (composed claim), the OOV report."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from privnlp.accounting import DPLedger
from privnlp.cli.main import app
from privnlp.mechanisms.text import Embeddings, Vickrey
from privnlp.mechanisms.text.files import sanitize_file, sidecar_path

TEXT = "Mail john.doe@example.com or call 555-123-4567 on 2024-01-02 about Zorblax and the film."


@pytest.fixture()
def emb():
    words = ("mail", "or", "call", "on", "about", "the", "film", "john", "doe", "com", "example")
    words += ("email", "phone", "date", "good", "bad", "a", "of", "to", "in")
    g = np.random.default_rng(0)
    return Embeddings(words, g.standard_normal((len(words), 6)))


def test_redact_pii_then_perturb(emb):
    m = Vickrey(0.5, embeddings=emb, redact_pii=True)
    for seed in range(10):
        out = m.sanitize(TEXT, seed=seed).text
        for secret in ("john.doe", "example.com", "555-123-4567", "2024-01-02"):
            assert secret not in out  # the adversary reads the released text
        assert "[EMAIL]" in out and "[PHONE]" in out and "[DATE]" in out  # placeholders verbatim
    plain = Vickrey(1e6, t=0.0, embeddings=emb, oov="keep").sanitize(TEXT, seed=0).text
    assert "john.doe@example.com" in plain.lower()  # without the step the e-mail's parts survive
    notes = " ".join(m.claim().notes)
    assert "PII step first" in notes and "heuristic" in notes and "name" in notes
    assert m.claim().kind.value == "metric_dp"  # the composed claim keeps the metric-DP guarantee


def test_cli_oov_report_and_redact_pii(tmp_path, emb):
    vec = tmp_path / "v.txt"
    vec.write_text(
        "\n".join(w + " " + " ".join(f"{x:.5f}" for x in v) for w, v in zip(emb.words, emb.vectors))
    )
    src = tmp_path / "in.txt"
    src.write_text((TEXT + "\n") * 5)
    out = tmp_path / "out.txt"
    r = CliRunner().invoke(
        app,
        ["sanitize", str(src), "-o", str(out), "--embeddings", str(vec), "--embeddings-format"]
        + ["glove", "--seed", "1", "--redact-pii", "--no-progress"],
    )
    assert r.exit_code == 0, r.output
    assert "top out-of-vocabulary units" in r.output and "'Zorblax' x5 (capitalised" in r.output
    side = sidecar_path(out).read_text()
    assert "Zorblax" not in side and "Zorblax" not in out.read_text()  # never released
    assert "john.doe" not in out.read_text()
    assert any("PII step first" in n for n in json.loads(side)["claim_per_word"]["notes"])


def test_report_lists_oov_kinds(tmp_path, emb):
    src = tmp_path / "in.txt"
    src.write_text("the X123 film NASA café Zorblax zorblax\n" * 3)
    rep = sanitize_file(
        src, tmp_path / "o.txt", Vickrey(1.0, embeddings=emb), seed=0, progress=False
    )
    kinds = {w: k for w, _, k in rep.oov_top}
    assert kinds["X123"].startswith("number") and kinds["NASA"] == "acronym"
    assert kinds["café"].startswith("non-ASCII") and kinds["zorblax"].startswith("rare")


def test_gensim_full_model_wordvectors_and_model_wv(tmp_path):
    from gensim.models import Word2Vec

    from privnlp.core.errors import InvalidArgument
    from privnlp.mechanisms.text import load_embeddings

    sents = [["good", "film", "bad", "film"], ["the", "good", "food"]] * 20
    model = Word2Vec(sents, vector_size=8, min_count=1, seed=0, workers=1, epochs=2)
    full = tmp_path / "w2v.model"
    model.save(str(full))
    wv = tmp_path / "vecs.wordvectors"
    model.wv.save(str(wv))
    other = tmp_path / "plain.bin2"
    model.save(str(other))  # a pickle with an unknown suffix: detected as a gensim save
    for p, fmt in ((full, "keyedvectors"), (full, None), (wv, None), (other, None)):
        e = load_embeddings(p, fmt)
        assert "film" in e and e.dim == 8
    with pytest.raises(InvalidArgument, match="Embeddings.from_keyed_vectors"):
        Vickrey(1.0, embeddings=model.wv)
    assert Vickrey(1.0, embeddings=Embeddings.from_keyed_vectors(model.wv)).sanitize("good").text


def test_tune_reads_input_prints_command_and_meaning(tmp_path, emb):
    vec = tmp_path / "v.txt"
    vec.write_text(
        "\n".join(w + " " + " ".join(f"{x:.5f}" for x in v) for w, v in zip(emb.words, emb.vectors))
    )
    src = tmp_path / "mine.txt"
    src.write_text("the good film or the bad film\ncall the phone about a date of mail\n" * 4)
    r = CliRunner().invoke(
        app,
        ["sanitize", "tune", str(src), "--embeddings", str(vec), "--embeddings-format", "glove"]
        + ["--samples", "30", "-C", "0.9", "--seed", "0"],
    )
    assert r.exit_code == 0, r.output
    assert "vocabulary 12 words" in r.output  # the in-vocabulary words of INPUT, not the lexicon
    assert "recovers about" in r.output and "% of these words" in r.output
    assert f"apply it: privnlp sanitize {src} -o OUTPUT -m " in r.output
    assert "not covered by the claim" in r.output


def test_cli_ledger_charges_passes_and_refuses_before_output(tmp_path, emb):
    """Brief B: `privnlp sanitize --ledger FILE [--target-epsilon E]` records each pass as a metric-DP
    run in the `vocab build --ledger` file format; a pass over the budget exits 2 and writes nothing."""
    vec = tmp_path / "v.txt"
    vec.write_text(
        "\n".join(w + " " + " ".join(f"{x:.5f}" for x in v) for w, v in zip(emb.words, emb.vectors))
    )
    src = tmp_path / "in.txt"
    src.write_text("the film of the mail\ncall\n")
    led = tmp_path / "led.json"
    base = ["--embeddings", str(vec), "--embeddings-format", "glove", "--no-progress"]

    def run(out: str, *extra: str):
        return CliRunner().invoke(
            app, ["sanitize", str(src), "-o", str(tmp_path / out), "-e", "3", *base, *extra]
        )

    r = run("a.txt", "--ledger", str(led), "--target-epsilon", "5")
    assert r.exit_code == 0, r.output
    d = json.loads(led.read_text())
    assert d["format"] == DPLedger().to_dict()["format"]  # the file `vocab build --ledger` writes
    back = DPLedger.from_dict(d)
    assert back.metric_epsilon() == 3.0 and back.metric_runs[0].words == 5
    before = led.read_text()
    r = run("b.txt", "--ledger", str(led), "--target-epsilon", "5")  # 3 + 3 > 5
    assert r.exit_code == 2 and "would become 6 > target 5" in r.output, r.output
    assert not (tmp_path / "b.txt").exists() and not sidecar_path(tmp_path / "b.txt").exists()
    assert led.read_text() == before  # the refused pass is not recorded
    r = run("c.txt", "--ledger", str(led))  # no budget: recorded, passes add up
    assert r.exit_code == 0, r.output
    assert DPLedger.from_dict(json.loads(led.read_text())).metric_epsilon() == 6.0
    r = run("d.txt", "--target-epsilon", "5")  # a budget without a ledger is refused
    assert r.exit_code == 2 and "--target-epsilon needs --ledger" in r.output
    led.write_text("[1]")
    r = run("e.txt", "--ledger", str(led))
    assert r.exit_code == 2 and "not a ledger object" in r.output
    assert not (tmp_path / "e.txt").exists()
