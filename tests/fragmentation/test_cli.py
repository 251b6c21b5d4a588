"""`privnlp fragment SRC TGT -o OUTDIR`: output files, progress, errors without partial output."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from privnlp.cli.main import app
from privnlp.data.parallel import generate_parallel


def _files(tmp_path, n=200, drop_last_target=False):
    c = generate_parallel(n, seed=3)
    tgt = c.target[:-1] if drop_last_target else c.target
    (tmp_path / "c.en").write_text("\n".join(c.source) + "\n")
    (tmp_path / "c.xx").write_text("\n".join(tgt) + "\n")
    return tmp_path / "c.en", tmp_path / "c.xx"


def test_cli_writes_release(tmp_path):
    src, tgt = _files(tmp_path)
    out = tmp_path / "out"
    r = CliRunner().invoke(
        app,
        [
            "fragment",
            str(src),
            str(tgt),
            "-o",
            str(out),
            "--tag",
            "--seed",
            "0",
            "--aligner",
            "fast_align_py",
            "--max-length",
            "7",
        ],
    )
    assert r.exit_code == 0, r.output
    side = json.loads((out / "fragments.json").read_text())
    assert side["settings"]["max_length"] == 7 and side["settings"]["tag"] is True
    lines = (out / "fragments.src").read_text().splitlines()
    assert len(lines) == side["n_released"] == len((out / "fragments.tgt").read_text().splitlines())


def test_cli_bad_input_no_output(tmp_path):
    src, tgt = _files(tmp_path, drop_last_target=True)
    for extra, msg in [
        ([], "mismatched line counts"),
        (["--discard-fraction", "1"], "discard_fraction must be in"),
        (["--max-length", "0"], "max_length must be in"),
    ]:
        out = tmp_path / "out"
        r = CliRunner().invoke(app, ["fragment", str(src), str(tgt), "-o", str(out), *extra])
        assert r.exit_code == 2 and msg in " ".join(r.output.split()), r.output
        assert not out.exists()
