"""Text in / text out, files, CLI, Dataset.map, bad input (paper: vickrey-mechanism-metric-dp.txt)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privnlp.accounting import DPLedger
from privnlp.core.errors import InvalidArgument, MalformedInput, PrivnlpError
from privnlp.mechanisms.text import Vickrey, bundled_embeddings, load_embeddings, word_spans
from privnlp.mechanisms.text.files import sanitize_file, sidecar_path


def test_detokenise_preserves_layout(small_emb):
    text = "  The movie,\twas GOOD!!  (really)\n"
    out = Vickrey(1e6, t=0.0, embeddings=small_emb, oov="keep").sanitize(
        text, rng=0
    )  # huge eps: identity
    assert (
        out.text == "  The movie,\twas GOOD!!  (really)\n"
    )  # casing of the input restored (issue #16)
    assert (out.n_words, out.n_perturbed, out.n_oov, out.n_kept) == (5, 3, 2, 2)
    noisy = Vickrey(0.01, t=0.5, embeddings=small_emb).sanitize(text, rng=0)
    assert [noisy.text[a:b] for a, b in word_spans(noisy.text)] != [
        "the",
        "movie",
        "was",
        "good",
        "really",
    ]
    assert noisy.text.count("\t") == 1 and noisy.text.endswith("(" + noisy.text.split("(")[1])
    assert len(word_spans(noisy.text)) == 5


def test_oov_policies_and_claim(small_emb):
    words = ["zyzzyva", "good"]
    r = Vickrey(1.0, embeddings=small_emb, oov="random").perturb_words(words, rng=0)
    assert r[0] in small_emb
    assert Vickrey(1.0, embeddings=small_emb, oov="mask").perturb_words(words, rng=0)[0] == "[MASK]"
    keep = Vickrey(1.0, embeddings=small_emb, oov="keep")
    assert keep.perturb_words(words, rng=0)[0] == "zyzzyva"
    assert any("VERBATIM" in n for n in keep.claim().notes)
    assert not any("VERBATIM" in n for n in Vickrey(1.0, embeddings=small_emb).claim().notes)
    c = keep.claim(n_words=7)
    assert c.unit.value == "text" and c.extra["n_perturbed_words"] == 7 and c.epsilon == 1.0
    assert Vickrey(2.0).claim().kind.value == "metric_dp"


def test_redactable_and_stopwords(small_emb):
    m = Vickrey(0.01, embeddings=small_emb, redactable={"good"}, skip_stopwords=True)
    out = m.sanitize("the film was good", rng=1)
    assert out.text.startswith("the film was ") and out.n_perturbed == 1
    assert any("redactable" in n for n in m.claim().notes)


def test_datasets_map(small_emb):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["good movie", "bad food"], "id": [1, 2]})
    m = Vickrey(0.5, embeddings=small_emb)
    out = ds.map(m.as_map_function("text", rng=np.random.default_rng(0)), batched=True)
    assert out["id"] == [1, 2] and len(out["text"]) == 2
    assert all(len(t.split()) == 2 for t in out["text"])


def test_load_embedding_formats(tmp_path, small_emb):
    glove = tmp_path / "g.txt"
    glove.write_text(
        "\n".join(
            w + " " + " ".join(f"{x:.5f}" for x in v)
            for w, v in zip(small_emb.words, small_emb.vectors)
        )
        + "\n"
    )
    e = load_embeddings(glove)
    assert e.words == small_emb.words and np.allclose(e.vectors, small_emb.vectors, atol=1e-4)
    w2v = tmp_path / "w.txt"
    w2v.write_text(f"{len(small_emb)} {small_emb.dim}\n" + glove.read_text())
    assert load_embeddings(w2v).words == small_emb.words
    from gensim.models import KeyedVectors

    kv = KeyedVectors(small_emb.dim)
    kv.add_vectors(list(small_emb.words), small_emb.vectors)
    kv.save_word2vec_format(str(tmp_path / "w.bin"), binary=True)
    assert load_embeddings(tmp_path / "w.bin").words == small_emb.words
    assert load_embeddings(glove).restrict(top_k=3).words == small_emb.words[:3]
    with pytest.raises(InvalidArgument):
        load_embeddings(tmp_path / "missing.txt")


def test_bundled_embeddings_deterministic(bundled):
    from privnlp.mechanisms.text import bundled_embeddings

    texts = ["the good movie was great", "the bad food was awful", "a great film"] * 30
    a = bundled_embeddings(texts=texts, dim=8, cache=False, epochs=2)
    b = bundled_embeddings(texts=texts, dim=8, cache=False, epochs=2)
    assert a.words == b.words and np.array_equal(a.vectors, b.vectors)
    assert len(bundled) > 500 and bundled.counts is not None


@pytest.mark.parametrize(
    "fmt,content,field",
    [
        ("txt", "good movie\n\nbad, awful food\n", "text"),
        ("jsonl", '{"text": "good movie", "id": 1}\n{"text": "bad food", "id": 2}\n', "text"),
        ("csv", 'id,review\n1,"good, movie"\n2,bad food\n', "review"),
    ],
)
def test_sanitize_file_roundtrip(tmp_path, small_emb, fmt, content, field):
    src = tmp_path / f"in.{fmt}"
    src.write_text(content)
    dst = tmp_path / f"out.{fmt}"
    rep = sanitize_file(
        src, dst, Vickrey(1.0, embeddings=small_emb), rng=0, field=field, progress=False
    )
    out = dst.read_text()
    assert out.count("\n") == content.count("\n")
    assert rep.records == (3 if fmt == "txt" else 2)
    side = json.loads(sidecar_path(dst).read_text())
    assert side["claim_per_word"]["kind"] == "metric_dp" and side["mechanism"] == "vickrey"
    if fmt == "jsonl":
        assert [json.loads(l)["id"] for l in out.splitlines()] == [1, 2]


@pytest.mark.parametrize(
    "name,data,err",
    [
        ("bad.jsonl", b'{"text": "ok"}\nthis is not json\n', "not JSON"),
        ("nofield.jsonl", b'{"body": "ok"}\n', "no field"),
        ("latin1.txt", "good caf\xe9\n".encode("latin-1"), "UTF-8"),
        ("bad.csv", b"id,other\n1,x\n", "no column"),
    ],
)
def test_bad_files_no_partial_output(tmp_path, small_emb, name, data, err):
    src = tmp_path / name
    src.write_bytes(b"".join([b'{"text": "good"}\n'] * 3 if name == "bad.jsonl" else []) + data)
    dst = tmp_path / "out" / ("o" + src.suffix)
    with pytest.raises(MalformedInput, match=err):
        sanitize_file(
            src, dst, Vickrey(1.0, embeddings=small_emb), rng=0, progress=False, chunk_records=1
        )
    assert not dst.exists() and not sidecar_path(dst).exists()
    assert not dst.parent.exists()  # the folder the run created is removed too (issue #31)


def test_cli_sanitize_and_errors(tmp_path, small_emb):
    from typer.testing import CliRunner

    from privnlp.cli.main import app

    glove = tmp_path / "g.txt"
    glove.write_text(
        "\n".join(
            w + " " + " ".join(f"{x:.5f}" for x in v)
            for w, v in zip(small_emb.words, small_emb.vectors)
        )
        + "\n"
    )
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "good movie"}\n{"text": "the food"}\n')
    r = CliRunner().invoke(
        app,
        [
            "sanitize",
            str(src),
            "-o",
            str(tmp_path / "o.jsonl"),
            "--embeddings",
            str(glove),
            "--format",
            "jsonl",
            "-e",
            "2",
            "-t",
            "0.3",
            "--seed",
            "1",
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    assert len((tmp_path / "o.jsonl").read_text().splitlines()) == 2
    assert (tmp_path / "o.jsonl.privnlp.json").exists()
    for args, msg in (
        (["-e", "0"], "epsilon"),
        (["-t", "1.5"], "t must be"),
        (["--format", "jsonl"], None),
    ):
        bad = tmp_path / "bad.txt"
        bad.write_text("plain text, not json\n")
        r = CliRunner().invoke(
            app,
            [
                "sanitize",
                str(bad),
                "-o",
                str(tmp_path / "x.out"),
                "--embeddings",
                str(glove),
                "--no-progress",
            ]
            + args,
        )
        assert r.exit_code == 2 and not (tmp_path / "x.out").exists()
        if msg:
            assert msg in r.output


def test_sanitize_file_charges_the_ledger(tmp_path):
    """Issue #28 item 4: one MetricDPRun per pass; a pass over the budget is refused before any output."""
    src = tmp_path / "in.txt"
    src.write_text("the cat sat on the mat\nthe dog\n", encoding="utf-8")
    mech = Vickrey(3.0, embeddings=bundled_embeddings(), oov="mask")
    led = DPLedger()
    sanitize_file(
        src, tmp_path / "a.txt", mech, seed=0, progress=False, ledger=led, target_epsilon=5
    )
    assert led.metric_epsilon() == 3.0 and len(led.metric_runs) == 1
    assert led.metric_runs[0].words == 6 and led.metric_runs[0].metric == "euclidean"
    with pytest.raises(PrivnlpError):
        sanitize_file(
            src, tmp_path / "b.txt", mech, seed=0, progress=False, ledger=led, target_epsilon=5
        )
    assert not (tmp_path / "b.txt").exists() and led.metric_epsilon() == 3.0
