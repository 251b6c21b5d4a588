"""Disk cache (hit, corruption -> rebuild), bundled models, from_pretrained helpers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from privnlp.models import (
    bundled_bert_classifier,
    bundled_lm,
    cache_dir,
    load_classifier,
    load_lm,
    tiny_gpt2,
)
from privnlp.models.cache import MANIFEST, entry_dir, get_or_build, is_valid


def _same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_cache_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVNLP_CACHE_DIR", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c" and (tmp_path / "c").is_dir()
    a = entry_dir("gpt2-lm", {"x": 1}, 0)
    assert a != entry_dir("gpt2-lm", {"x": 1}, 1) and a != entry_dir("gpt2-lm", {"x": 2}, 0)
    assert a == entry_dir("gpt2-lm", {"x": 1}, 0) and a.parent == tmp_path / "c" / "models"


def test_get_or_build_hit_and_corrupted_entry_rebuilt(tmp_path, monkeypatch):
    from transformers import GPT2LMHeadModel

    monkeypatch.setenv("PRIVNLP_CACHE_DIR", str(tmp_path))
    builds = []

    def build(out: Path) -> None:
        builds.append(out)
        tiny_gpt2(50, n_layer=1, n_embd=16, seed=7).save_pretrained(str(out))

    def load(path: Path):
        return GPT2LMHeadModel.from_pretrained(str(path), local_files_only=True)

    cfg = {"kind": "test"}
    m1 = get_or_build("t", cfg, 0, build, load)
    m2 = get_or_build("t", cfg, 0, build, load)
    assert len(builds) == 1 and _same_weights(m1, m2)
    final = entry_dir("t", cfg, 0)
    assert is_valid(final) and not [
        p for p in final.parent.iterdir() if p.name.startswith(".")
    ]  # no temp left
    # corrupted weights file -> detected by the manifest checksum, rebuilt
    # (never truncate in place: m1's tensors are memory-mapped from that file -> SIGBUS)
    weights = final / "model.safetensors"
    data = weights.read_bytes()[:100]
    weights.unlink()
    weights.write_bytes(data)
    assert not is_valid(final)
    m3 = get_or_build("t", cfg, 0, build, load)
    assert len(builds) == 2 and _same_weights(m1, m3) and is_valid(final)
    # partial entry (manifest never written: interrupted build) -> rebuilt
    (final / MANIFEST).unlink()
    get_or_build("t", cfg, 0, build, load)
    assert len(builds) == 3 and is_valid(final)


@pytest.fixture(scope="module")
def bundled_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp("privnlp-cache")
    mp.setenv("PRIVNLP_CACHE_DIR", str(path))
    yield path
    mp.undo()


def test_bundled_lm_quick_builds_and_hits_cache(bundled_cache):
    torch_state = torch.random.get_rng_state()
    t0 = time.perf_counter()
    model, tok = bundled_lm("quick", seed=0)
    build_s = time.perf_counter() - t0
    # target <= 30 s on 2 idle cores; the bound is loose because CI cores are shared
    assert build_s < 90, build_s
    (entry,) = (bundled_cache / "models").glob("gpt2-lm-*")
    info = json.loads((entry / "privnlp-train.json").read_text())
    assert sum(info["losses"][-5:]) < 0.6 * sum(info["losses"][:5])
    t0 = time.perf_counter()
    model2, tok2 = bundled_lm("quick", seed=0)
    assert time.perf_counter() - t0 < build_s and _same_weights(model, model2)
    assert tok2.get_vocab() == tok.get_vocab() and not model2.training
    text = "Dear Anna, please call me back."
    assert tok.decode(tok(text)["input_ids"]) == text
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    with pytest.raises(ValueError, match="preset"):
        bundled_lm("huge")


def test_bundled_bert_classifier_quick(bundled_cache):
    model, tok = bundled_bert_classifier("quick", seed=0)
    (entry,) = (bundled_cache / "models").glob("bert-classifier-*")
    info = json.loads((entry / "privnlp-train.json").read_text())
    assert info["test_accuracy"] >= 0.8, info[
        "test_accuracy"
    ]  # held-out 20% of generate_sentiment(1000)
    enc = tok(["an absolutely wonderful and delightful experience"], return_tensors="pt")
    assert model(**enc).logits.shape == (1, 2)


def test_load_local_checkpoint_roundtrip(bundled_cache):
    model, tok = bundled_lm("quick", seed=0)
    (entry,) = (bundled_cache / "models").glob("gpt2-lm-*")
    m2, t2 = load_lm(entry)
    assert _same_weights(model, m2) and t2.pad_token is not None
    (entry,) = (bundled_cache / "models").glob("bert-classifier-*")
    c, ct = load_classifier(entry)
    assert c.config.num_labels == 2 and ct.mask_token == "[MASK]"


def test_from_pretrained_offline_error_names_path(tmp_path, monkeypatch):
    from privnlp.models.pretrained import CheckpointNotFound

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        CheckpointNotFound,
        match=r"name_or_path='privnlp-no-such/model'.*HF_HUB_OFFLINE.*hf download",
    ):
        load_lm("privnlp-no-such/model")
    with pytest.raises(CheckpointNotFound, match=r"save_pretrained"):
        load_classifier(tmp_path)  # an empty folder
    with pytest.raises(ValueError, match="name_or_path"):
        load_lm("")
