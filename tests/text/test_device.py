"""Issue 31 item 3: the device path (torch exact top-k) gives the CPU exact path's answer.

Run here with torch on the CPU (``device="torch-cpu"``); on a GPU machine the same tests run with
``PRIVNLP_TEST_DEVICE=cuda``. No GPU figure is claimed from this machine."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from privnlp.mechanisms.text import Embeddings, Vickrey, VickreyK
from privnlp.mechanisms.text.files import sanitize_file, sidecar_path
from privnlp.mechanisms.text.neighbors import ExactIndex, TorchIndex

pytest.importorskip("torch")
DEVICE = os.environ.get("PRIVNLP_TEST_DEVICE", "cpu")


@pytest.fixture(scope="module")
def emb():
    g = np.random.default_rng(4)
    n, d = 6000, 32
    centers = g.standard_normal((60, d))
    E = (centers[g.integers(0, 60, n)] + 0.3 * g.standard_normal((n, d))).astype(np.float32)
    E[100] = E[101]  # exact duplicates: ties must break to the lower id, as on the CPU
    E[2000:2003] = E[7]
    return Embeddings(tuple(f"w{i}" for i in range(n)), E)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_torch_index_equals_exact_index(emb, k):
    g = np.random.default_rng(k)
    m = Vickrey(12.0, embeddings=emb)
    q = emb.vectors[g.integers(0, len(emb), 3000)] + m.sample_noise(3000, rng=g)
    q[:10] = emb.vectors[[100, 101, 7, 2000, 2001, 2002, 0, 1, 2, 3]]  # on the duplicates
    ti = TorchIndex(emb, device=DEVICE, block=700)
    got, ref = ti.query(q, k), ExactIndex(emb).query(q, k)
    np.testing.assert_array_equal(got.ids, ref.ids)
    np.testing.assert_array_equal(got.dists, ref.dists)  # the same float64 distances, bit for bit
    assert got.ids[0, 0] == 100 and got.ids[2, 0] == 7


@pytest.mark.parametrize("cls,kw", [(Vickrey, {"t": 0.5}), (VickreyK, {"ts": (1.0, 2.0, 3.0)})])
def test_device_path_same_output_as_cpu_exact(emb, tmp_path, cls, kw):
    dev = "torch-cpu" if DEVICE == "cpu" else DEVICE
    words = " ".join(emb.words[i] for i in range(0, 6000, 7))
    src = tmp_path / "in.txt"
    src.write_text("\n".join(words[i : i + 200] for i in range(0, len(words), 200)))
    outs = {}
    for name, d in (("cpu", "cpu"), ("dev", dev)):
        m = cls(3.0, embeddings=emb, index="exact" if d == "cpu" else "auto", device=d, **kw)
        dst = tmp_path / f"{name}.txt"
        sanitize_file(src, dst, m, seed=9, progress=False, chunk_records=5)
        outs[name] = dst.read_text()
        side = json.loads(sidecar_path(dst).read_text())
        assert side["index"]["kind"] == ("exact" if d == "cpu" else "torch")
    assert outs["dev"] == outs["cpu"]
    assert outs["cpu"] != src.read_text()


def test_device_refuses_approximate_index(emb):
    from privnlp.core.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="index must be 'auto' or 'exact'"):
        Vickrey(3.0, embeddings=emb, index="faiss", device="cuda")


def test_device_search_batches_span_blocks_and_keep_the_output(emb, monkeypatch):
    """The device path searches many blocks per query (so the CPU re-rank of one block overlaps the next
    block's GEMM) whatever batch_tokens is; the noise is drawn before, so the output is the CPU one."""
    from privnlp.mechanisms.text import mechanisms

    dev = "torch-cpu" if DEVICE == "cpu" else DEVICE
    texts = [" ".join(emb.words[i] for i in range(j, 6000, 37)) for j in range(12)]
    sizes = []
    real = TorchIndex.query

    def spy(self, q, k):
        sizes.append(len(q))
        return real(self, q, k)

    monkeypatch.setattr(TorchIndex, "query", spy)
    monkeypatch.setattr(mechanisms, "DEVICE_SEARCH_BLOCKS", 2)
    cpu = Vickrey(3.0, embeddings=emb, index="exact", batch_tokens=64)
    gpu = Vickrey(3.0, embeddings=emb, device=dev, batch_tokens=64)
    # blocks of batch_tokens queries: device memory bounded by batch_tokens x V
    assert gpu._nn().block == 64
    gpu._nn().block = 300
    a = [r.text for r in cpu.sanitize_many(texts, seed=5)]
    b = [r.text for r in gpu.sanitize_many(texts, seed=5)]
    assert a == b and a != texts
    n = sum(len(t.split()) for t in texts)  # searches of 600 words (2 blocks), not 64
    assert sizes == [600] * (n // 600) + [n % 600]
