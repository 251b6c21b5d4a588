"""Issue #17: audit your own model and data -- a checkpoint saved with save_pretrained + a jsonl file."""

from __future__ import annotations

import json

import pytest

from privnlp.core import InvalidArgument


@pytest.fixture(scope="module")
def texts():
    from privnlp.data import generate_corpus

    return generate_corpus(n_users=4, records_per_user=5, seed=3).texts()


def test_cli_audits_a_saved_causal_lm_on_a_jsonl_file(tmp_path, texts):
    from typer.testing import CliRunner

    from privnlp.cli.main import app
    from privnlp.models import tiny_gpt2, train_bpe_tokenizer

    tok = train_bpe_tokenizer(texts, 300)
    eos = tok.eos_token_id
    model = tiny_gpt2(
        len(tok),
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=128,
        seed=0,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    ckpt = tmp_path / "my-lm"
    model.save_pretrained(str(ckpt))
    tok.save_pretrained(str(ckpt))
    data = tmp_path / "records.jsonl"
    data.write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts[:8]))
    )
    res = CliRunner().invoke(
        app,
        [
            "evaluate",
            "--model",
            str(ckpt),
            "--data",
            str(data),
            "--field",
            "text",
            "--report-dir",
            str(tmp_path / "reports"),
        ],
    )
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "reports" / "my-lm.json").read_text())
    assert [a["attack"] for a in rep["attacks"]] == ["film"]
    assert 0.0 <= rep["attacks"][0]["defended"]["rougeL"]["mean"] <= 1.0
    assert rep["config"]["kind"] == "lm" and "environment" in rep["config"]
    assert (tmp_path / "reports" / "my-lm.html").read_text().startswith("<!DOCTYPE html>")


def test_audit_model_api_on_a_saved_classifier(tmp_path, texts):
    from privnlp.evaluation.byom import audit_model, load_checkpoint
    from privnlp.models import tiny_bert_classifier, train_wordpiece_tokenizer

    tok = train_wordpiece_tokenizer(texts, 300)
    model = tiny_bert_classifier(
        len(tok),
        num_labels=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=128,
        pad_token_id=tok.pad_token_id,
        seed=0,
    )
    model.save_pretrained(str(tmp_path / "clf"))
    tok.save_pretrained(str(tmp_path / "clf"))
    m, t = load_checkpoint(tmp_path / "clf")
    short = [x[:60] for x in texts[:6]]
    rep = audit_model(
        m, t, short, attacks=["rlg"], labels=[0, 1, 2, 3, 4, 5], batch_size=3, trials=1
    )
    a = rep.attacks[0]
    assert a.attack == "rlg" and rep.config["kind"] == "classifier"
    # RLG is exact for batch size < hidden size on an untrained classifier (RLG paper)
    assert a.defended[a.headline_metric].mean == pytest.approx(1.0)
    with pytest.raises(InvalidArgument, match="labels"):
        audit_model(m, t, short, labels=[0])
    with pytest.raises(InvalidArgument, match="save_pretrained"):
        load_checkpoint(tmp_path)


def test_audit_model_inserts_canaries_by_fine_tune(texts):
    from privnlp.evaluation.byom import audit_model
    from privnlp.models import tiny_gpt2, train_bpe_tokenizer

    tok = train_bpe_tokenizer(texts, 300)
    eos = tok.eos_token_id
    model = tiny_gpt2(
        len(tok),
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=128,
        seed=0,
        bos_token_id=eos,
        eos_token_id=eos,
        pad_token_id=eos,
    )
    rep = audit_model(
        model, tok, texts[:10], attacks=["canary_exposure"], canaries=1, finetune_steps=40, trials=1
    )
    a = rep.attacks[0]
    assert a.attack == "canary_exposure" and a.defended[a.headline_metric].mean > 0.0
