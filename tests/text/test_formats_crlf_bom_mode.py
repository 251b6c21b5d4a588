"""Issue 31, "Bad input and formats" (single process): CRLF line ends and a UTF-8 BOM survive in the
txt, JSONL and CSV outputs (a BOM CSV's first column is still `text`), and the output and sidecar get
the mode a plain open() gives (0666 minus the umask), not mkstemp's 0600."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from privnlp.mechanisms.text import Embeddings, Vickrey
from privnlp.mechanisms.text.files import sanitize_file, sidecar_path

BOM = b"\xef\xbb\xbf"


@pytest.fixture(scope="module")
def emb():
    words = ("good", "great", "bad", "awful", "movie", "film", "the", "a", "service", "food")
    return Embeddings(words, np.random.default_rng(0).standard_normal((len(words), 8)))


@pytest.mark.parametrize(
    "name,body",
    [
        ("in.txt", b"good movie\r\nbad food\n\r\nthe film\r\n"),
        ("in.jsonl", b'{"text": "good movie"}\r\n{"text": "bad food"}\n{"text": "a film"}\r\n'),
        # a CSV file's rows end like its header row (csv.writer has one line terminator)
        ("in.csv", b'text,id\r\n"good movie",1\r\nbad food,2\r\n"the\r\nfilm",3\r\n'),
        ("in.csv", b'text,id\n"good movie",1\nbad food,2\n"the\r\nfilm",3\n'),
    ],
)
@pytest.mark.parametrize("bom", [False, True])
def test_crlf_and_bom_survive(tmp_path, emb, name, body, bom):
    src = tmp_path / name
    data = (BOM if bom else b"") + body
    src.write_bytes(data)
    dst = tmp_path / f"out{src.suffix}"
    rep = sanitize_file(src, dst, Vickrey(1.0, embeddings=emb), seed=0, progress=False)
    out = dst.read_bytes()
    assert out.startswith(BOM) == bom
    # every line end is the input's: the same number of CRLF and of bare LF, in the same order
    ends = [ln.endswith(b"\r") for ln in data.split(b"\n")]
    assert [ln.endswith(b"\r") for ln in out.split(b"\n")] == ends
    assert rep.records == 3 + (name == "in.txt")  # txt: the blank line is a record
    assert out != data  # the words were perturbed (epsilon 1 on 10 words)
    if name == "in.jsonl":
        assert [json.loads(ln).keys() for ln in out.decode("utf-8-sig").splitlines()] == [
            {"text"}
        ] * 3


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_output_and_sidecar_honour_the_umask(tmp_path, emb, umask):
    src = tmp_path / "in.txt"
    src.write_text("good movie\nbad food\n")
    dst = tmp_path / "out.txt"
    old = os.umask(umask)
    try:
        sanitize_file(src, dst, Vickrey(1.0, embeddings=emb), seed=0, progress=False)
        (tmp_path / "plain.txt").write_text("x")
    finally:
        os.umask(old)
    plain = stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode)
    assert plain == 0o666 & ~umask
    for p in (dst, sidecar_path(dst)):
        assert stat.S_IMODE(os.stat(p).st_mode) == plain, p
