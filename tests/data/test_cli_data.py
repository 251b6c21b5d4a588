import json

from typer.testing import CliRunner

from privnlp.cli.main import app
from privnlp.data import generate_corpus, load_texts, read_jsonl_corpus


def test_data_generate(tmp_path):
    out = tmp_path / "corpus"
    res = CliRunner().invoke(
        app,
        [
            "data",
            "generate",
            "--out",
            str(out),
            "--n-users",
            "3",
            "--records-per-user",
            "2",
            "--seed",
            "4",
            "--n-sentiment",
            "50",
        ],
    )
    assert res.exit_code == 0, res.output
    assert read_jsonl_corpus(out / "corpus.jsonl").records == generate_corpus(3, 2, seed=4).records
    assert (out / "corpus.conll").read_text().count("# id = ") == 6
    assert len(load_texts(out / "sentiment.jsonl")) == 50
    assert {json.loads(l)["label"] for l in (out / "sentiment.jsonl").read_text().splitlines()} == {
        0,
        1,
    }
    assert sorted(p.name for p in out.iterdir()) == [
        "corpus.conll",
        "corpus.jsonl",
        "sentiment.jsonl",
    ]
