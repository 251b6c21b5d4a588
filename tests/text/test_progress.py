"""Issue 31 item 2: the progress bar shows the words/s of the run (tqdm on stderr)."""

from __future__ import annotations

import re

import numpy as np

from privnlp.mechanisms.text import Embeddings, Vickrey
from privnlp.mechanisms.text.files import sanitize_file


def test_progress_bar_reports_words_per_second(tmp_path, capsys):
    words = ("good", "great", "bad", "awful", "movie", "film", "the", "a")
    emb = Embeddings(words, np.random.default_rng(0).standard_normal((len(words), 8)))
    src = tmp_path / "in.txt"
    src.write_text("good movie the film\n" * 50)
    sanitize_file(src, tmp_path / "o.txt", Vickrey(1.0, embeddings=emb), seed=0, chunk_records=7)
    err = capsys.readouterr().err
    assert "sanitize" in err
    rates = [float(x.replace(",", "")) for x in re.findall(r"([\d,]+) words/s", err)]
    assert (
        rates and rates[-1] > 0
    )  # words so far / seconds since the start (tqdm shows it at most every 0.1 s)
    sanitize_file(src, tmp_path / "q.txt", Vickrey(1.0, embeddings=emb), seed=0, progress=False)
    assert "words/s" not in capsys.readouterr().err
