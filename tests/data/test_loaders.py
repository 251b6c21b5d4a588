import pytest

from privnlp.core.errors import InvalidArgument, MalformedInput
from privnlp.data import load_parallel, load_texts


def test_txt_jsonl_csv(tmp_path):
    (tmp_path / "a.txt").write_text("one\n\ntwo words\n", encoding="utf-8")
    assert load_texts(tmp_path / "a.txt") == ["one", "two words"]
    (tmp_path / "a.jsonl").write_text('{"text": "x", "body": "b1"}\n{"text": "y", "body": "b2"}\n')
    assert load_texts(tmp_path / "a.jsonl") == ["x", "y"]
    assert load_texts(tmp_path / "a.jsonl", field="body") == ["b1", "b2"]
    (tmp_path / "a.csv").write_text('id,text\n1,"hello, world"\n2,"multi\nline"\n')
    assert load_texts(tmp_path / "a.csv") == ["hello, world", "multi\nline"]
    assert load_texts(tmp_path / "a.csv", field="id") == ["1", "2"]
    (tmp_path / "data.log").write_text("z\n")
    assert load_texts(tmp_path / "data.log", fmt="txt") == ["z"]
    with pytest.raises(InvalidArgument, match="fmt"):
        load_texts(tmp_path / "data.log")


@pytest.mark.parametrize(
    "name,content,pattern",
    [
        ("bad.txt", b"ok\n\xff\xfe broken\n", r"bad\.txt, line 2: not valid UTF-8"),
        ("bad.jsonl", b'{"text": "a"}\n{"text": \n', r"bad\.jsonl, line 2: invalid JSON"),
        (
            "miss.jsonl",
            b'{"text": "a"}\n\n{"body": "b"}\n',
            r"miss\.jsonl, line 3: missing field 'text'",
        ),
        ("arr.jsonl", b'["a"]\n', r"arr\.jsonl, line 1: expected a JSON object"),
        ("num.jsonl", b'{"text": 3}\n', r"num\.jsonl, line 1: field 'text' is int"),
        ("empty.txt", b"  \n\n", r"empty\.txt: empty file"),
        ("ragged.csv", b"id,text\n1,a\n2,b,c\n", r"ragged\.csv, line 3: 3 fields, expected 2"),
        ("nocol.csv", b"id,body\n1,a\n", r"nocol\.csv, line 1: no 'text' column"),
    ],
)
def test_malformed_files(tmp_path, name, content, pattern):
    (tmp_path / name).write_bytes(content)
    with pytest.raises(MalformedInput, match=pattern):
        load_texts(tmp_path / name)


def test_missing_csv_column_and_file(tmp_path):
    (tmp_path / "a.csv").write_text("text\nx\n")
    with pytest.raises(MalformedInput, match="missing column 'body'"):
        load_texts(tmp_path / "a.csv", field="body")
    with pytest.raises(MalformedInput, match="not found"):
        load_texts(tmp_path / "nope.txt")


def test_hf_dataset():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["a", "b"], "n": [1, 2]})
    assert load_texts(ds, field="text") == ["a", "b"]
    with pytest.raises(MalformedInput, match="no column 'body'"):
        load_texts(ds, field="body")
    with pytest.raises(MalformedInput, match="row 0"):
        load_texts(ds, field="n")


def test_parallel(tmp_path):
    (tmp_path / "c.en").write_text("the cat\na dog\n")
    (tmp_path / "c.xx").write_text("tac eht\ngod a\n")
    assert load_parallel(tmp_path / "c.en", tmp_path / "c.xx") == (
        ["the cat", "a dog"],
        ["tac eht", "god a"],
    )
    (tmp_path / "d.xx").write_text("tac eht\n")
    with pytest.raises(MalformedInput, match=r"c\.en has 2 lines but .*d\.xx has 1"):
        load_parallel(tmp_path / "c.en", tmp_path / "d.xx")
    (tmp_path / "e.xx").write_text("tac eht\n\n")
    with pytest.raises(MalformedInput, match=r"e\.xx, line 2: empty line"):
        load_parallel(tmp_path / "c.en", tmp_path / "e.xx")
    (tmp_path / "f.xx").write_text("")
    with pytest.raises(MalformedInput, match="empty file"):
        load_parallel(tmp_path / "c.en", tmp_path / "f.xx")
