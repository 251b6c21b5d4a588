"""Federated NER: a BiLSTM tagger trained with FedAvg across n clients, with and without client DP-SGD.

Paper: ``../shared/papers/fl-dp-sequence-tagging-ner.txt`` (BiLSTM tagger, FedAvg over n clients that
each hold an equal share of the training data, optionally DP-SGD inside every client; tables of
precision / recall / F1 per number of clients) and ``../shared/papers/wikipii-pii-extraction-federated.txt``
(strict and partial span metrics). The data is the bundled PII-tagged corpus
(:func:`privnlp.data.generate_corpus`, ``Record.tokens_and_tags()``); test users are held out.

Usage::

    table = federated_ner_table((1, 2, 4), rounds=5, rng=0)
    print(table.to_markdown())       # one row per (clients, dp)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from privnlp.core.errors import InvalidArgument, check_range
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus
from privnlp.metrics import ner_span_metrics

from .client import ClientData, tagger_task
from .mechanisms import FedAvg
from .simulator import FedSimulator

__all__ = [
    "NERData",
    "NERRow",
    "NERTable",
    "ner_data",
    "evaluate_tagger",
    "federated_ner",
    "federated_ner_table",
]

PAD, UNK = "<pad>", "<unk>"


@dataclass(frozen=True)
class NERData:
    """Encoded train / test sentences (train grouped by natural user), the vocabulary and tag set.

    Attributes:
        train: ``(user id, (tokens, tags))`` per training sentence.
        test: ``(tokens, tags)`` per test sentence (held-out users).
        vocab: lowercased word -> id (``<pad>`` = 0, ``<unk>`` = 1), from the training users only.
        tags: the tag set, ``"O"`` first.
        max_len: sentences are truncated / padded to this many tokens.
    """

    train: tuple[tuple[str, tuple[list[str], list[str]]], ...]  # (user id, (tokens, tags))
    test: tuple[tuple[list[str], list[str]], ...]
    vocab: Mapping[str, int]
    tags: tuple[str, ...]
    max_len: int

    def encode(
        self, sents: Sequence[tuple[list[str], list[str]]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.zeros(len(sents), self.max_len, dtype=torch.long)
        tg = torch.full((len(sents), self.max_len), -100, dtype=torch.long)
        t2i = {t: i for i, t in enumerate(self.tags)}
        for r, (toks, tags) in enumerate(sents):
            toks, tags = toks[: self.max_len], tags[: self.max_len]
            ids[r, : len(toks)] = torch.tensor(
                [self.vocab.get(w.lower(), 1) for w in toks], dtype=torch.long
            )
            tg[r, : len(tags)] = torch.tensor([t2i[t] for t in tags], dtype=torch.long)
        return ids, tg


def ner_data(
    n_users: int = 24,
    records_per_user: int = 10,
    *,
    heldout_users: int = 4,
    max_len: int = 48,
    seed: int = 0,
) -> NERData:
    """The bundled PII-tagged corpus as tagging data; the last ``heldout_users`` users are the test set.

    Args:
        n_users: users in the generated corpus.
        records_per_user: records per user.
        heldout_users: users kept for the test set, an integer in [1, n_users - 1].
        max_len: the encoded length in tokens.
        seed: the corpus seed.

    Returns:
        The encoded data.

    Raises:
        InvalidArgument: ``heldout_users`` out of range.
    """

    check_range("heldout_users", heldout_users, 1, n_users - 1, integer=True)
    corpus = generate_corpus(n_users=n_users, records_per_user=records_per_user, seed=seed)
    users = list(corpus.users)
    held = set(users[-heldout_users:])
    train, test = [], []
    for r in corpus.records:
        tt = r.tokens_and_tags()
        (test.append(tt) if r.user_id in held else train.append((r.user_id, tt)))
    words = sorted({w.lower() for _, (toks, _) in train for w in toks})
    vocab = {PAD: 0, UNK: 1, **{w: i + 2 for i, w in enumerate(words)}}
    tags = tuple(
        ["O"]
        + sorted(
            ({t for _, (_, tg) in train for t in tg} | {t for _, tg in test for t in tg}) - {"O"}
        )
    )
    return NERData(tuple(train), tuple(test), vocab, tags, int(max_len))


def evaluate_tagger(model: torch.nn.Module, data: NERData) -> dict[str, float]:
    """Strict and partial span P/R/F1 (``privnlp.metrics.ner_span_metrics``) on the test users.

    Args:
        model: a tagger returning ``[B, T, num_tags]`` logits.
        data: the data whose test users are scored.

    Returns:
        ``{strict,partial}_{precision,recall,f1}``.
    """

    ids, _ = data.encode(data.test)
    was = model.training
    model.eval()
    with torch.inference_mode():
        pred = model(ids).argmax(-1)
    model.train(was)
    gold_tags, pred_tags = [], []
    for r, (toks, tags) in enumerate(data.test):
        n = min(len(toks), data.max_len)
        gold_tags.append(list(tags[:n]))
        pred_tags.append([data.tags[int(i)] for i in pred[r, :n]])
    m = ner_span_metrics(gold_tags, pred_tags)
    out = {}
    for scheme in ("strict", "partial"):
        prf = getattr(m, scheme)
        out.update(
            {
                f"{scheme}_precision": float(prf.precision),
                f"{scheme}_recall": float(prf.recall),
                f"{scheme}_f1": float(prf.f1),
            }
        )
    return out


@dataclass(frozen=True)
class NERRow:
    """One configuration of the federated NER table.

    Attributes:
        clients: the number of clients (all take part in every round).
        dp: whether clients ran DP-SGD.
        metrics: the test metrics of :func:`evaluate_tagger`.
        record_epsilon: the record-level epsilon of client DP-SGD (``None`` without it).
        record_delta: its delta (``None`` without DP).
        rounds: the number of FedAvg rounds.
        seconds: wall-clock seconds of the run.
    """

    clients: int
    dp: bool
    metrics: Mapping[str, float]
    record_epsilon: float | None
    record_delta: float | None
    rounds: int
    seconds: float


@dataclass(frozen=True)
class NERTable:
    """The federated NER table (rows per number of clients, without and with client DP-SGD).

    Attributes:
        rows: one row per configuration.
        config: the data and training settings.
    """

    rows: tuple[NERRow, ...]
    config: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "config": dict(self.config)}

    def to_markdown(self) -> str:
        head = (
            "| clients | client DP-SGD | record eps | strict P | strict R | strict F1 | partial P | partial R "
            "| partial F1 |\n|---|---|---|---|---|---|---|---|---|"
        )
        lines = [head]
        for r in self.rows:
            m = r.metrics
            eps = "-" if r.record_epsilon is None else f"{r.record_epsilon:.3g}"
            lines.append(
                f"| {r.clients} | {'yes' if r.dp else 'no'} | {eps} | "
                + " | ".join(
                    f"{m[f'{s}_{k}']:.3f}"
                    for s in ("strict", "partial")
                    for k in ("precision", "recall", "f1")
                )
                + " |"
            )
        return "\n".join(lines)


def _split(train: Sequence[Any], n_clients: int, g: np.random.Generator) -> list[list[Any]]:
    """Equal shares of the shuffled training sentences (the NER paper's split across n clients)."""
    order = g.permutation(len(train))
    return [[train[i] for i in part] for part in np.array_split(order, n_clients)]


def federated_ner(
    data: NERData,
    n_clients: int,
    *,
    rounds: int = 5,
    dp: bool = False,
    client_noise_multiplier: float = 0.6,
    client_max_grad_norm: float = 1.0,
    client_delta: float = 1e-4,
    local_epochs: float = 5.0,
    batch_size: int = 8,
    lr: float = 3.0,
    emb_dim: int = 32,
    hidden: int = 32,
    rng: Any,
) -> NERRow:
    """FedAvg (all n clients every round, weighted by examples) of a BiLSTM softmax tagger; with ``dp``
    every client runs DP-SGD (record level) instead of SGD.

    Args:
        data: the encoded NER data.
        n_clients: clients the training sentences are split across equally, an integer in [1, number of
            training sentences].
        rounds: FedAvg rounds.
        dp: run client DP-SGD (record level).
        client_noise_multiplier: client DP-SGD noise multiplier (with ``dp``).
        client_max_grad_norm: client DP-SGD clip norm (with ``dp``).
        client_delta: the record-level delta (with ``dp``).
        local_epochs: local epochs per round.
        batch_size: local batch size.
        lr: local learning rate.
        emb_dim: tagger embedding width.
        hidden: tagger hidden width per direction.
        rng: split / initialisation / simulation randomness (keyword-only).

    Returns:
        The row (test metrics, record epsilon with ``dp``).

    Raises:
        InvalidArgument: ``n_clients`` out of range (or another argument, from :class:`FedAvg`).
        InvalidPrivacyParameter: client DP-SGD parameters out of range.
    """

    check_range("n_clients", n_clients, 1, max(1, len(data.train)), integer=True)
    g = as_numpy(rng)
    seed = int(g.integers(0, 2**31 - 1))
    parts = _split([tt for _, tt in data.train], n_clients, g)
    clients = {f"client-{i:03d}": ClientData(data.encode(p)) for i, p in enumerate(parts)}
    task = tagger_task(
        len(data.vocab),
        len(data.tags),
        emb_dim=emb_dim,
        hidden=hidden,
        seed=seed % (2**31),
        dp_compatible=bool(dp),
    )
    kw: dict[str, Any] = {}
    if dp:
        kw = dict(
            client_noise_multiplier=client_noise_multiplier,
            client_max_grad_norm=client_max_grad_norm,
            client_delta=client_delta,
        )
    mech = FedAvg(
        clients_per_round=n_clients,
        local_epochs=local_epochs,
        local_batch_size=batch_size,
        local_lr=lr,
        **kw,
    )
    t0 = time.perf_counter()
    res = FedSimulator(mech, task, clients).run(rounds, rng=seed, evaluate=False)
    metrics = evaluate_tagger(res.model, data)
    rec = res.claim.extra.get("record_epsilon") if dp else None
    return NERRow(
        n_clients,
        bool(dp),
        metrics,
        None if rec is None else float(rec),
        client_delta if dp else None,
        int(rounds),
        time.perf_counter() - t0,
    )


def federated_ner_table(
    client_counts: Sequence[int] = (1, 2, 4, 8),
    *,
    dp: Sequence[bool] = (False, True),
    n_users: int = 24,
    records_per_user: int = 10,
    heldout_users: int = 4,
    rounds: int = 5,
    rng: Any,
    progress: bool = False,
    **kw: Any,
) -> NERTable:
    """The NER paper's table: strict / partial P, R, F1 per number of clients, without and with client
    DP-SGD. ``kw`` goes to :func:`federated_ner` (``client_noise_multiplier``, ``lr``, ...).

    Args:
        client_counts: the numbers of clients (not empty).
        dp: the client DP-SGD settings to run.
        n_users: users in the generated corpus.
        records_per_user: records per user.
        heldout_users: users kept for the test set.
        rounds: FedAvg rounds.
        rng: randomness (keyword-only).
        progress: show a progress bar over configurations.
        **kw: passed to :func:`federated_ner`.

    Returns:
        The table.

    Raises:
        InvalidArgument: empty ``client_counts`` (or an argument out of range).
    """
    if not client_counts:
        raise InvalidArgument("client_counts must not be empty")
    g = as_numpy(rng)
    data = ner_data(
        n_users, records_per_user, heldout_users=heldout_users, seed=int(g.integers(0, 2**31 - 1))
    )
    combos = [(n, d) for d in dp for n in client_counts]
    it: Any = combos
    if progress:
        it = tqdm(combos, desc="federated NER", unit="config")
    base = int(g.integers(0, 2**31 - 1))
    rows = []
    for n, d in it:  # every configuration gets its own seed (same split/init with and without DP)
        rows.append(
            federated_ner(
                data,
                int(n),
                rounds=rounds,
                dp=bool(d),
                rng=np.random.default_rng([base, int(n)]),
                **kw,
            )
        )
    cfg = {
        "n_users": n_users,
        "records_per_user": records_per_user,
        "heldout_users": heldout_users,
        "rounds": rounds,
        "train_sentences": len(data.train),
        "test_sentences": len(data.test),
        "vocab": len(data.vocab),
        "tags": list(data.tags),
        **{k: v for k, v in kw.items()},
    }
    return NERTable(tuple(rows), cfg)
