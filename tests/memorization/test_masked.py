"""Masked-LM secrets (DP-BERT paper's HS / HSH / HHSHH formats): a memorized secret word ranks first."""

from __future__ import annotations


def test_masked_secret_memorized_vs_not():
    import torch

    from privnlp.attacks.memorization import canary_exposure, make_masked_secret
    from privnlp.data import DEFAULT_WORDS
    from privnlp.models import tiny_bert_mlm, train_wordpiece_tokenizer

    c = make_masked_secret("HSH", rng=3)
    filler = ["the patient was given " + w + " today" for w in DEFAULT_WORDS]
    tok = train_wordpiece_tokenizer(filler + [c.text, " ".join(DEFAULT_WORDS)], 300)
    fresh = tiny_bert_mlm(
        len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=1, seed=0
    )
    model = tiny_bert_mlm(
        len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=1, seed=0
    )
    texts = filler + [c.text] * 8
    enc = tok(texts, padding=True, return_tensors="pt")
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    special = torch.tensor([tok.cls_token_id, tok.sep_token_id, tok.pad_token_id])
    for _ in range(60):
        ids = enc["input_ids"].clone()
        maskable = ~torch.isin(ids, special)
        m = (torch.rand(ids.shape, generator=g) < 0.3) & maskable
        labels = torch.where(m, ids, torch.full_like(ids, -100))
        ids[m] = tok.mask_token_id
        loss = model(input_ids=ids, attention_mask=enc["attention_mask"], labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    hi = canary_exposure(model, tok, c, kind="masked", rng=0)
    lo = canary_exposure(fresh, tok, c, kind="masked", rng=0)
    assert hi.space_size == 32 and hi.method == "exact"
    assert hi.exposure >= 4.0, hi  # rank <= 2 of 32
    assert lo.exposure < hi.exposure
