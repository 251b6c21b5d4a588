"""The PII tagger on noisy labels: central, federated over K sites, client DP-SGD (the ledger states the claim)."""

from __future__ import annotations

import math

import pytest

from privnlp.core.errors import InvalidArgument
from privnlp.mechanisms.pii.tagger import (
    DPConfig,
    PIITagger,
    evaluate_tags,
    split_sites,
    train_tagger,
)


def test_central_tagger_learns_from_noisy_labels(tiny_tagger_run, pii_split):
    _, test, _ = pii_split
    gold = [r.tokens_and_tags() for r in test]
    pred = tiny_tagger_run.tagger.tags_for_tokens([t for t, _ in gold])
    ev = evaluate_tags([g for _, g in gold], pred)
    assert ev.metrics.partial.f1 > 0.3, ev.to_dict()  # far above an all-O tagger (0)
    assert ev.metrics.strict.f1 > 0.1 and {"PERSON", "PHONE", "DATE"} <= set(ev.by_class)
    assert tiny_tagger_run.claim.kind.value == "heuristic" and tiny_tagger_run.sites == 1


def test_tagger_save_load_roundtrip(tiny_tagger_run, tmp_path):
    p = tmp_path / "t.pt"
    tiny_tagger_run.tagger.save(p)
    again = PIITagger.load(p)
    text = "Call me at 415-555-0123, Dr. Smith."
    assert again.tags(text) == tiny_tagger_run.tagger.tags(text)
    with pytest.raises(InvalidArgument, match="not a privnlp PII tagger"):
        (tmp_path / "x.pt").write_bytes(b"junk")
        PIITagger.load(tmp_path / "x.pt")


def test_federated_over_sites(pii_split):
    train, _, sents = pii_split
    run = train_tagger(
        sents,
        groups=[r.user_id for r in train],
        sites=3,
        rounds=2,
        lr=3.0,
        emb_dim=16,
        hidden=16,
        rng=1,
    )
    assert run.sites == 3 and len(run.history) == 2
    assert all(len(h.selected) == 3 for h in run.history)
    with pytest.raises(InvalidArgument, match="n_sites"):
        split_sites(sents, [r.user_id for r in train], 999, rng=0)


def test_dp_training_claim_from_ledger(pii_split):
    train, _, sents = pii_split
    run = train_tagger(
        sents[:40],
        groups=[r.user_id for r in train][:40],
        sites=2,
        rounds=1,
        local_epochs=0.5,
        lr=1.0,
        emb_dim=8,
        hidden=8,
        dp=DPConfig(noise_multiplier=1.0, max_grad_norm=1.0, delta=1e-3),
        rng=7,
    )
    c = run.claim
    assert c.kind.value == "dp" and c.unit == "record"
    assert 0 < c.epsilon < math.inf and c.delta == 1e-3
    assert c.noise_seeded  # an explicit seed was passed: the claim says so
    assert "record" in c.statement()
    assert run.ledger  # per-site DP-SGD steps are in the ledger


def test_word_dropout_only_in_training_mode():
    import torch

    from privnlp.mechanisms.pii.tagger import TagVocab, bilstm_task

    sents = [(["Call", "Jane", "at", "home", "Jane"], ["O", "B-PERSON", "O", "O", "B-PERSON"])]
    vocab = TagVocab.build(sents, min_count=1)
    ids, tags, unk = vocab.encode(sents, with_unk=True)
    assert unk[0, :5].tolist() == [2, 2, 1, 1, 2]  # <Unk> for capitalised words, <unk> otherwise
    task = bilstm_task(
        len(vocab.words), len(vocab.tags), emb_dim=8, hidden=8, seed=0, word_dropout=1.0
    )
    model = task.model_factory()
    from privnlp.mechanisms.training.dp_sgd import per_sample_token_loss

    all_unk = torch.where(ids > 2, unk, ids)
    model.train()
    assert torch.allclose(
        task.loss_fn(model, (ids, tags, unk)), per_sample_token_loss(model(all_unk), tags)
    )
    model.eval()
    assert torch.allclose(
        task.loss_fn(model, (ids, tags, unk)), per_sample_token_loss(model(ids), tags)
    )
    with pytest.raises(InvalidArgument, match="word_dropout"):
        bilstm_task(10, 3, word_dropout=1.5)


def test_jitter_boundaries_moves_one_token_and_keeps_types():
    from privnlp.mechanisms.pii.experiments import jitter_boundaries, union_tags
    from privnlp.metrics.ner import bio_to_spans

    tags = ["O", "B-PERSON", "I-PERSON", "O", "B-DATE", "O", "O"]
    assert jitter_boundaries(tags, 0.0, rng=0) == tags
    for s in range(20):
        out = jitter_boundaries(tags, 1.0, rng=s)
        spans = bio_to_spans(out)
        assert [lab for _, _, lab in spans] == ["PERSON", "DATE"]
        assert (
            spans[0][1] - spans[0][0] == 1 and spans[1][1] - spans[1][0] == 2
        )  # PERSON shrinks, DATE grows
    # union: tagger entities are added only where the labels are all O
    assert union_tags(["B-PERSON", "O", "O"], ["B-LOC", "B-ORG", "I-ORG"]) == [
        "B-PERSON",
        "B-ORG",
        "I-ORG",
    ]
