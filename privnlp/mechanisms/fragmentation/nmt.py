"""Small end-to-end utility check in the spirit of the paper's Table 2 (CPU, a few minutes).

Paper: ``../shared/papers/phrase-pair-fragmentation-nmt.txt`` (Sec. 4-5): a generic NMT model is
fine-tuned on (a) nothing, (b) released phrase pairs (max length 4/7, 50% discarded, with and
without ``<P>`` tags), (c) the full in-domain sentences; BLEU (sacrebleu) on full in-domain
test sentences. Here the "generic" model is a tiny GRU encoder-decoder with dot attention
pre-trained on the toy language's *general* sentences, and the in-domain data are its
*medical* sentences (drug names and side effects the generic model never saw).

Imports torch: not imported by ``privnlp.mechanisms.fragmentation``'s ``__init__``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from privnlp.data.parallel import generate_parallel
from privnlp.mechanisms.fragmentation.corpus import from_corpus
from privnlp.mechanisms.fragmentation.mechanism import CLOSE_TAG, OPEN_TAG, PhraseFragmentation

__all__ = ["TinySeq2Seq", "train_seq2seq", "translate", "bleu", "table2"]

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


class Vocab:
    def __init__(self, sentences: Sequence[Sequence[str]]):
        words = sorted({w for s in sentences for w in s})
        self.itos = SPECIALS + [w for w in words if w not in SPECIALS]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def encode(self, toks: Sequence[str]) -> list[int]:
        return [self.stoi.get(w, UNK) for w in toks]


class TinySeq2Seq(nn.Module):
    """1-layer bidirectional GRU encoder, GRU decoder with dot-product attention."""

    def __init__(self, n_src: int, n_tgt: int, emb: int = 64, hidden: int = 128):
        super().__init__()
        self.src_emb = nn.Embedding(n_src, emb, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(n_tgt, emb, padding_idx=PAD)
        self.enc = nn.GRU(emb, hidden // 2, batch_first=True, bidirectional=True)
        self.dec = nn.GRU(emb + hidden, hidden, batch_first=True)
        self.out = nn.Linear(2 * hidden, n_tgt)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h, last = self.enc(self.src_emb(src))
        return h, torch.cat([last[0], last[1]], dim=-1).unsqueeze(0)

    def step(
        self,
        y: torch.Tensor,
        state: torch.Tensor,
        ctx: torch.Tensor,
        enc: torch.Tensor,
        mask: torch.Tensor,
    ):
        o, state = self.dec(torch.cat([self.tgt_emb(y), ctx], dim=-1), state)
        scores = torch.bmm(o, enc.transpose(1, 2)).masked_fill(~mask.unsqueeze(1), -1e9)
        ctx = torch.bmm(scores.softmax(-1), enc)
        return self.out(torch.cat([o, ctx], dim=-1)), state, ctx

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        enc, state = self.encode(src)
        mask = src != PAD
        ctx = torch.zeros(src.size(0), 1, enc.size(-1))
        logits = []
        for t in range(tgt_in.size(1)):
            lo, state, ctx = self.step(tgt_in[:, t : t + 1], state, ctx, enc, mask)
            logits.append(lo)
        return torch.cat(logits, dim=1)


def _pad(seqs: list[list[int]]) -> torch.Tensor:
    n = max(len(s) for s in seqs)
    return torch.tensor([s + [PAD] * (n - len(s)) for s in seqs], dtype=torch.long)


def train_seq2seq(
    model: TinySeq2Seq,
    pairs: Sequence[tuple[Sequence[str], Sequence[str]]],
    sv: Vocab,
    tv: Vocab,
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 3e-3,
    rng: Any,
) -> list[float]:
    g = np.random.default_rng(
        int(np.random.default_rng(rng).integers(2**31))
        if not isinstance(rng, np.random.Generator)
        else rng.integers(2**31)
    )
    data = [(sv.encode(s), [BOS] + tv.encode(t) + [EOS]) for s, t in pairs]
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    lossf = nn.CrossEntropyLoss(ignore_index=PAD)
    losses = []
    model.train()
    for _ in range(steps):
        idx = g.integers(0, len(data), batch_size)
        src = _pad([data[i][0] for i in idx])
        tgt = _pad([data[i][1] for i in idx])
        logits = model(src, tgt[:, :-1])
        loss = lossf(logits.reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@torch.no_grad()
def translate(
    model: TinySeq2Seq, sentences: Sequence[Sequence[str]], sv: Vocab, tv: Vocab, max_len: int = 40
) -> list[list[str]]:
    model.eval()
    out: list[list[str]] = []
    for b in range(0, len(sentences), 128):
        src = _pad([sv.encode(s) for s in sentences[b : b + 128]])
        enc, state = model.encode(src)
        mask = src != PAD
        ctx = torch.zeros(src.size(0), 1, enc.size(-1))
        y = torch.full((src.size(0), 1), BOS, dtype=torch.long)
        res = [[] for _ in range(src.size(0))]
        done = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            lo, state, ctx = model.step(y, state, ctx, enc, mask)
            y = lo.argmax(-1)
            for i, w in enumerate(y[:, 0].tolist()):
                if not done[i]:
                    if w == EOS:
                        done[i] = True
                    else:
                        res[i].append(tv.itos[w])
            if bool(done.all()):
                break
        out.extend(res)
    return out


def bleu(hyps: Sequence[Sequence[str]], refs: Sequence[Sequence[str]]) -> float:
    import sacrebleu

    return float(
        sacrebleu.corpus_bleu(
            [" ".join(h) for h in hyps], [[" ".join(r) for r in refs]], tokenize="none", force=True
        ).score
    )


@dataclass(frozen=True)
class Table2Row:
    system: str
    bleu: float
    mean_output_length: float
    train_pairs: int


def table2(*, seed: int = 0, **kwargs: Any) -> list[Table2Row]:
    """BLEU of: no fine-tuning, fine-tuning on fragments (per max length, tag/no tag), full sentences.

    Seeded without touching the caller's global torch RNG (``torch.random.fork_rng``)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return _table2(seed=seed, **kwargs)


def _table2(
    *,
    seed: int = 0,
    n_general: int = 2000,
    n_domain: int = 1000,
    n_test: int = 200,
    pretrain_steps: int = 600,
    finetune_steps: int = 250,
    max_lengths: Sequence[int] = (4, 7),
    discard_fraction: float = 0.5,
) -> list[Table2Row]:
    """BLEU of: no fine-tuning, fine-tuning on fragments (per max length, tag/no tag), full sentences."""

    general = generate_parallel(n_general, seed=seed + 1, medical_rate=0.0)
    domain = generate_parallel(n_domain + n_test, seed=seed + 2, medical_rate=0.7)
    pt = from_corpus(domain)
    _, _, tr, te = pt.split_by_document(
        n_test / (n_domain + n_test), rng=np.random.default_rng(seed)
    )
    train_dom, test_dom = domain.subset(tr), domain.subset(te)
    g_src = [s.split() for s in general.source]
    g_tgt = [t.split() for t in general.target]
    d_src = [s.split() for s in train_dom.source]
    d_tgt = [t.split() for t in train_dom.target]
    test_src = [s.split() for s in test_dom.source]
    test_tgt = [t.split() for t in test_dom.target]
    sv = Vocab(g_src + d_src + [[OPEN_TAG, CLOSE_TAG]])
    tv = Vocab(g_tgt + d_tgt + [[OPEN_TAG, CLOSE_TAG]])
    base = TinySeq2Seq(len(sv.itos), len(tv.itos))
    train_seq2seq(base, list(zip(g_src, g_tgt)), sv, tv, steps=pretrain_steps, rng=seed)

    def evaluate(model: TinySeq2Seq, name: str, n_pairs: int) -> Table2Row:
        hyp = translate(model, test_src, sv, tv)
        return Table2Row(name, bleu(hyp, test_tgt), float(np.mean([len(h) for h in hyp])), n_pairs)

    rows = [evaluate(base, "baseline (no fine-tuning)", 0)]
    for L in max_lengths:
        for tag in (False, True):
            rel = PhraseFragmentation(L, discard_fraction, tag=tag).fragment(
                from_corpus(train_dom),
                rng=np.random.default_rng(seed),
                alignments=train_dom.alignments,
            )
            pairs = [(s.split(), t.split()) for s, t in zip(rel.source, rel.target)]
            m = copy.deepcopy(base)
            train_seq2seq(m, pairs, sv, tv, steps=finetune_steps, lr=1e-3, rng=seed)
            rows.append(evaluate(m, f"fragments max {L} {'tag' if tag else 'no tag'}", len(pairs)))
    m = copy.deepcopy(base)
    train_seq2seq(m, list(zip(d_src, d_tgt)), sv, tv, steps=finetune_steps, lr=1e-3, rng=seed)
    rows.append(evaluate(m, "full sentences", len(d_src)))
    return rows
