"""The PII tagger as a task of the Flower deployment (run config ``task = "pii_tagger"``).

Paper: ``../shared/papers/wikipii-pii-extraction-federated.txt`` §5 (federated/remote: the model travels to
the sites, the annotated documents never leave them). :mod:`privnlp.mechanisms.federated.flower` calls
:func:`flower_task_and_data` for this task name, on the ServerApp (to build the initial model) and on every
ClientApp (to train on its site's data).

* **Sites.** The bundled corpus of ``num_partitions * USERS_PER_SITE`` users (run-config ``seed``) is divided
  among the partitions (users ``k, k + n, k + 2n, ...`` go to partition ``k``); every site auto-annotates its
  own documents from its own known fields (:class:`~privnlp.mechanisms.pii.AutoAnnotator`, regex patterns
  on), nothing else. The seed reaches every SuperNode and seeds only non-private randomness (the synthetic
  data, the model initialisation and word dropout), never privacy noise.
* **Vocabulary.** Every party must build the same architecture, so the word vocabulary comes from *public*
  text: a separately generated corpus (:func:`public_vocab`, seed ``seed + PUBLIC_SEED_OFFSET``) that no site
  holds. Names of the sites' users are mostly outside it and reach the tagger as ``<Unk>`` / ``<unk>``: it
  tags them from their context, which is what it must do on new documents anyway.
* **Model.** The BiLSTM tagger of :func:`~privnlp.mechanisms.pii.tagger.bilstm_task` (``nn.LSTM``, or opacus'
  DPLSTM when the run config asks for client DP-SGD) with word dropout :data:`WORD_DROPOUT`.

:func:`tagger_from_state` turns the ServerApp's ``final.pt`` into a :class:`~.tagger.PIITagger`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from privnlp.core.errors import InvalidArgument
from privnlp.data import generate_corpus
from privnlp.data.corpus import LABELS, tokenize
from privnlp.mechanisms.federated.client import ClientData
from privnlp.models import BiLSTMTagger

from .annotate import AutoAnnotator
from .tagger import PIITagger, TagVocab, bilstm_task

__all__ = [
    "FLOWER_TASK",
    "USERS_PER_SITE",
    "RECORDS_PER_USER",
    "WORD_DROPOUT",
    "public_vocab",
    "site_sentences",
    "flower_task_and_data",
    "tagger_from_state",
]

FLOWER_TASK = "pii_tagger"
USERS_PER_SITE = 6
RECORDS_PER_USER = 8
PUBLIC_USERS = 24
PUBLIC_SEED_OFFSET = 1_000_003
WORD_DROPOUT = 0.25
EMB_DIM = HIDDEN = 48


@lru_cache(maxsize=4)
def public_vocab(seed: int) -> Any:
    """The shared vocabulary: words seen at least twice in a public corpus (no site's data), every PII label."""

    pub = generate_corpus(PUBLIC_USERS, RECORDS_PER_USER, seed=int(seed) + PUBLIC_SEED_OFFSET)
    sents = [([t for t, _, _ in tokenize(r.text)], []) for r in pub.records]
    return TagVocab.build(sents, min_count=2, labels=LABELS)


def site_sentences(
    seed: int, partition_id: int, num_partitions: int
) -> list[tuple[list[str], list[str]]]:
    """One site's auto-annotated documents (tokens, noisy BIO tags), from its own known fields only."""

    if not 0 <= int(partition_id) < int(num_partitions):
        raise InvalidArgument(f"partition_id must be in [0, {num_partitions}); got {partition_id}")
    corpus = generate_corpus(int(num_partitions) * USERS_PER_SITE, RECORDS_PER_USER, seed=int(seed))
    mine = set(list(corpus.users)[int(partition_id) :: int(num_partitions)])
    recs = [r for r in corpus.records if r.user_id in mine]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unmatched fields are expected noise here
        docs = AutoAnnotator(patterns=True).annotate_records(
            recs, {r.id: corpus.known_fields[r.id] for r in recs}
        )
    return [d.tokens_and_tags() for d in docs]


def flower_task_and_data(
    cfg: Mapping[str, Any], partition_id: int, num_partitions: int
) -> tuple[Any, Any]:
    """``(Task, ClientData)`` of partition ``partition_id`` for the Flower apps (see the module docstring)."""
    seed = int(cfg.get("seed", 0))
    vocab = public_vocab(seed)
    dp = float(cfg.get("client-max-grad-norm", 0.0) or 0.0) > 0
    task = bilstm_task(
        len(vocab.words),
        len(vocab.tags),
        emb_dim=EMB_DIM,
        hidden=HIDDEN,
        seed=seed,
        dp_compatible=dp,
        word_dropout=WORD_DROPOUT,
    )
    data = ClientData(
        vocab.encode(site_sentences(seed, partition_id, num_partitions), with_unk=True)
    )
    return task, data


def tagger_from_state(state: Mapping[str, Any], seed: int = 0) -> Any:
    """A :class:`~.tagger.PIITagger` from a trained state dict (the ServerApp's ``final.pt``)."""
    vocab = public_vocab(int(seed))
    state = dict(state)
    for dp in (
        False,
        True,
    ):  # nn.LSTM, or opacus' DPLSTM (a run with client DP-SGD): other parameter names
        model = BiLSTMTagger(
            len(vocab.words), len(vocab.tags), emb_dim=EMB_DIM, hidden=HIDDEN, dp_compatible=dp
        )
        if set(state) == {k for k, _ in model.named_parameters()}:
            model.load_state_dict(state, strict=False)
            break
    else:
        raise InvalidArgument(
            f"state does not fit the pii_tagger task's model (seed={seed}): keys {sorted(state)[:4]}"
        )
    model.eval()
    return PIITagger(model, vocab)
