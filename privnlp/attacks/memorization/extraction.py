"""Canary extraction: Random Sampling, Beam Search and Carlini-style search over the canary alphabet.

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (Sec. 3):

* **Random Sampling (RS)**: given the canary's 2-symbol prefix, is the canary the least
  log-perplexity sequence among ``M`` random suffixes? (the paper: 2M random suffixes of a 5-word
  canary; ties count against the canary).
* **Beam Search (BS)**: given a 1-symbol prefix, is the canary among the top-5 continuations of a
  greedy beam search (width 5)?
* counting memorized canaries over a ``p_u x p_e`` grid (Table 1): :func:`federated_secret_sharer`
  inserts canaries (each user a secret sharer with probability ``p_u``, each of a sharer's examples
  replaced with probability ``p_e``), :func:`count_memorized` counts RS / BS hits.

Carlini et al. 2019's extraction (:func:`beam_extract`) knows only the pattern prefix and searches
the alphabet (digits / the word list) symbol by symbol, keeping the ``beam_width`` most likely
partial secrets (a beam approximation of their shortest-path search): the secret is *extracted*
if it is the top-ranked full candidate.

The search space is the canary's alphabet (its randomness space). A partial secret is scored by the
probability that the text continues with it, summed over every tokenization
(:func:`~privnlp.attacks.memorization._lm.prefix_log_probs`): a BPE that merged a repeated secret into one
token ("4821") still gives the partial "48" the mass of the tokens that start with it, where the canonical
tokenization's rare single-digit tokens would lose the secret in the first steps. Full candidates are ranked
by full-text log-perplexity. (Exact for byte-level BPE; tokenizers whose tokens do not concatenate back to the
text fall back to canonical scoring.)
Threat model: black-box querier who knows the format, a prefix of the secret (RS/BS) or nothing
of it (Carlini extraction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, check_probability, check_range
from privnlp.core.observations import BlackBoxLM
from privnlp.core.protocols import Attack, AttackResult
from privnlp.core.registry import ATTACKS
from privnlp.core.rng import as_numpy
from privnlp.data.canaries import Canary
from privnlp.data.corpus import Record
from privnlp.metrics import edit_distance

from ._lm import LN2, prefix_log_probs
from .exposure import BLACK_BOX_CANARY, _truth_canary, canary_template, score_candidates

__all__ = [
    "render_partial",
    "random_sampling_test",
    "beam_search_test",
    "beam_extract",
    "ExtractionResult",
    "federated_secret_sharer",
    "count_memorized",
    "CanaryExtraction",
]

_SENTINEL = "\x00"


def _flat_alphabets(canary: Canary) -> list[tuple[str, ...]]:
    return [s.alphabet for s in canary.slots for _ in range(s.length)]


def _split(canary: Canary, symbols: Sequence[str]) -> list[list[str]]:
    out, i = [], 0
    for s in canary.slots:
        out.append(list(symbols[i : i + s.length]))
        i += s.length
    return out


def render_partial(canary: Canary, symbols: Sequence[str]) -> str:
    """The canary text up to (and including) the first ``len(symbols)`` secret symbols.

    Args:
        canary: the canary (or template).
        symbols: the first secret symbols, at most the canary's total number of symbols.

    Returns:
        The canary text cut after the last given symbol (the full text when all are given).

    Raises:
        InvalidArgument: more symbols than the canary has.
    """
    n = sum(s.length for s in canary.slots)
    if len(symbols) > n:
        raise InvalidArgument(f"symbols must hold at most {n} symbols; got {len(symbols)}")
    full = list(symbols) + [_SENTINEL] * (n - len(symbols))
    text = canary.render(_split(canary, full))
    if len(symbols) == n:
        return text
    return text[: text.index(_SENTINEL)].rstrip(" ")


def _symbols(canary: Canary) -> list[str]:
    return [v for vals in canary.values for v in vals]


def random_sampling_test(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    *,
    n_samples: int = 2000,
    prefix_symbols: int = 2,
    kind: str = "causal",
    rng: Any,
) -> tuple[bool, int]:
    """RS: the canary's first ``prefix_symbols`` symbols are known; ``n_samples`` random completions
    are drawn. Returns ``(memorized, rank)``: memorized iff the canary's log-perplexity is strictly
    lower than every sampled suffix's (ties count against it).

    Args:
        model: the LM.
        tokenizer: its tokenizer.
        canary: the canary, with its secret.
        n_samples: random completions drawn, an integer in [1, 10**8] (draws equal to the secret are dropped).
        prefix_symbols: how many leading secret symbols are known, in [0, number of symbols - 1].
        kind: ``"causal"`` or ``"masked"``.
        rng: sampling randomness (keyword-only).

    Returns:
        ``(memorized, rank)``.

    Raises:
        InvalidArgument: an argument out of range or unknown ``kind``.
    """
    check_range("n_samples", n_samples, 1, 10**8, integer=True)
    sym = _symbols(canary)
    check_range("prefix_symbols", prefix_symbols, 0, len(sym) - 1, integer=True)
    g = as_numpy(rng)
    alph = _flat_alphabets(canary)
    texts = []
    for _ in range(int(n_samples)):
        tail = [a[int(g.integers(len(a)))] for a in alph[prefix_symbols:]]
        cand = sym[:prefix_symbols] + tail
        if cand != sym:
            texts.append(canary.render(_split(canary, cand)))
    scores = score_candidates(model, tokenizer, canary, [canary.text] + texts, kind=kind)
    rank = int(1 + np.count_nonzero(scores[1:] <= scores[0]))
    return rank == 1, rank


def _beam(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    start: Sequence[str],
    width: int,
    kind: str,
    batch_size: int = 512,
) -> list[tuple[tuple[str, ...], float]]:
    alph = _flat_alphabets(canary)
    beams: list[tuple[tuple[str, ...], float]] = [(tuple(start), 0.0)]
    context = canary.prefix.rstrip()
    for pos in range(len(start), len(alph)):
        cands = [b + (a,) for b, _ in beams for a in alph[pos]]
        texts = [render_partial(canary, c) for c in cands]
        if kind != "causal":
            scores = _masked_partial(model, tokenizer, canary, cands)
        elif pos + 1 < len(alph) and context and all(t.startswith(context) for t in texts):
            # a partial secret: the probability that the text continues with it, over every tokenization
            scores = (
                -prefix_log_probs(
                    model,
                    tokenizer,
                    context,
                    [t[len(context) :] for t in texts],
                    batch_size=batch_size,
                )
                / LN2
            )
        else:
            scores = score_candidates(
                model, tokenizer, canary, texts, kind=kind, batch_size=batch_size
            )
        order = np.lexsort((np.arange(len(cands)), scores))[:width]
        beams = [(cands[i], float(scores[i])) for i in order]
    return beams


def _masked_partial(
    model: Any, tokenizer: Any, canary: Canary, cands: list[tuple[str, ...]]
) -> np.ndarray:
    n = sum(s.length for s in canary.slots)
    if any(len(c) != n for c in cands):
        raise InvalidArgument(
            "beam search on a masked LM needs single-symbol secrets (HS/HSH/HHSHH formats)"
        )
    return score_candidates(
        model, tokenizer, canary, [canary.render(_split(canary, c)) for c in cands], kind="masked"
    )


def beam_search_test(
    model: Any,
    tokenizer: Any,
    canary: Canary,
    *,
    prefix_symbols: int = 1,
    beam_width: int = 5,
    top_k: int = 5,
    kind: str = "causal",
) -> tuple[bool, list[str]]:
    """BS: from a ``prefix_symbols``-symbol prefix, beam search (width ``beam_width``) over the
    alphabet; memorized iff the canary is among the ``top_k`` final continuations.

    Args:
        model: the LM.
        tokenizer: its tokenizer.
        canary: the canary, with its secret.
        prefix_symbols: how many leading secret symbols are known, in [0, number of symbols].
        beam_width: beam width, an integer in [1, 10**6].
        top_k: how many final continuations count, in [1, beam_width].
        kind: ``"causal"`` or ``"masked"`` (a masked LM needs single-symbol secrets).

    Returns:
        ``(memorized, the top_k continuations)``.

    Raises:
        InvalidArgument: an argument out of range.
    """
    check_range("beam_width", beam_width, 1, 10**6, integer=True)
    check_range("top_k", top_k, 1, beam_width, integer=True)
    sym = _symbols(canary)
    check_range("prefix_symbols", prefix_symbols, 0, len(sym), integer=True)
    beams = _beam(model, tokenizer, canary, sym[:prefix_symbols], beam_width, kind)[:top_k]
    texts = [canary.render(_split(canary, b)) for b, _ in beams]
    return canary.text in texts, texts


@dataclass(frozen=True)
class ExtractionResult:
    """Ranked full candidates of a Carlini-style extraction (best first) with their log-perplexities (bits).

    Attributes:
        candidates: the full candidate texts, best (lowest log-perplexity) first.
        log_perplexities: their log-perplexities in bits.
    """

    candidates: tuple[str, ...]
    log_perplexities: tuple[float, ...]


def beam_extract(
    model: Any,
    tokenizer: Any,
    template: Canary,
    *,
    beam_width: int = 32,
    kind: str = "causal",
    known_symbols: Sequence[str] = (),
) -> ExtractionResult:
    """Carlini-style extraction: search the secret symbol by symbol from the pattern prefix,
    keeping the ``beam_width`` most likely partial secrets; returns the final beam ranked.

    Args:
        model: the LM.
        tokenizer: its tokenizer.
        template: the canary template (pattern and randomness space; no secret needed).
        beam_width: beam width, an integer in [1, 10**6].
        kind: ``"causal"`` or ``"masked"``.
        known_symbols: leading secret symbols assumed known.

    Returns:
        The final beam, ranked by full-text log-perplexity.

    Raises:
        InvalidArgument: ``beam_width`` out of range.
    """
    check_range("beam_width", beam_width, 1, 10**6, integer=True)
    beams = _beam(model, tokenizer, template, list(known_symbols), beam_width, kind)
    texts = [template.render(_split(template, b)) for b, _ in beams]
    full = score_candidates(model, tokenizer, template, texts, kind=kind)
    order = np.lexsort((np.arange(len(texts)), full))
    return ExtractionResult(tuple(texts[i] for i in order), tuple(float(full[i]) for i in order))


# ----------------------------------------------------------------------------- the FL secret sharer
def federated_secret_sharer(
    records: Sequence[Record], canary: Canary, *, p_u: float, p_e: float, rng: Any
) -> tuple[list[Record], tuple[str, ...], int]:
    """Figure 1 of the FL secret-sharer paper: every user is a secret sharer with probability ``p_u``
    (Poisson), every example of a sharer is *replaced* by the canary with probability ``p_e``.
    Returns ``(records, sharer user ids, number of insertions)``.

    Args:
        records: the users' records.
        canary: the canary whose text replaces the chosen examples.
        p_u: probability that a user is a secret sharer, in [0, 1].
        p_e: probability that each of a sharer's examples is replaced, in [0, 1].
        rng: randomness (keyword-only).

    Raises:
        InvalidArgument: ``p_u`` or ``p_e`` outside [0, 1].
    """
    check_probability("p_u", p_u)
    check_probability("p_e", p_e)
    g = as_numpy(rng)
    users = list(dict.fromkeys(r.user_id for r in records))
    sharers = {u for u in users if g.random() < p_u}
    out, n = [], 0
    for r in records:
        if r.user_id in sharers and g.random() < p_e:
            out.append(replace(r, text=canary.text, spans=()))
            n += 1
        else:
            out.append(r)
    return out, tuple(u for u in users if u in sharers), n


def count_memorized(
    model: Any, tokenizer: Any, canaries: Sequence[Canary], *, n_samples: int = 2000, rng: Any
) -> dict[str, int]:
    """Table 1's counts: how many ``canaries`` RS and BS classify as memorized.

    Args:
        model: the LM.
        tokenizer: its tokenizer.
        canaries: the inserted canaries, with their secrets.
        n_samples: random completions per RS test.
        rng: randomness (keyword-only).

    Returns:
        ``{"RS": count, "BS": count, "total": len(canaries)}``.
    """
    g = as_numpy(rng)
    rs = sum(
        random_sampling_test(model, tokenizer, c, n_samples=n_samples, rng=g)[0] for c in canaries
    )
    bs = sum(beam_search_test(model, tokenizer, c)[0] for c in canaries)
    return {"RS": int(rs), "BS": int(bs), "total": len(canaries)}


# ----------------------------------------------------------------------------- the attack
def _extraction_scorer(result: AttackResult, ground_truth: Any) -> dict[str, float]:
    raw = result.raw
    text, canary = _truth_canary(raw["template"], ground_truth)
    guesses = list(result.reconstructions)
    out = {
        "extracted": float(bool(guesses) and guesses[0] == text),
        "in_top_k": float(text in guesses[: raw["top_k"]]),
    }

    secret_len = max(1, len(text) - len(raw["template"].prefix))
    out["edit_distance"] = float(
        min(
            (edit_distance(text, h, level="char") for h in guesses[: raw["top_k"]]),
            default=float(secret_len),
        )
    )
    if canary is not None and canary.values:
        model, tok, kind = raw["model"], raw["tokenizer"], raw["kind"]
        sym = _symbols(canary)
        if len(sym) > 2:
            out["rs_memorized"] = float(
                random_sampling_test(
                    model, tok, canary, n_samples=raw["n_samples"], kind=kind, rng=raw["seed"]
                )[0]
            )
        if len(sym) > 1:
            out["bs_memorized"] = float(beam_search_test(model, tok, canary, kind=kind)[0])
    return out


@ATTACKS.register("canary_extraction")
class CanaryExtraction(Attack):
    """Extract a canary's secret from a black-box LM (Carlini et al. 2019 search over the alphabet),
    and score the paper's Random Sampling / Beam Search memorization tests.

    Paper: ``unintended-memorization-under-fl.txt`` (Sec. 3, RS and BS; Table 1). Observation:
    :class:`BlackBoxLM` with ``meta['canary_pattern']`` (and ``canary_vocabulary`` for word slots).
    ``run`` performs the extraction knowing only the pattern; the scorer reports ``extracted``
    (top-1 guess == the secret; headline), ``in_top_k``, the smallest character ``edit_distance`` of
    the top-k guesses, and ``rs_memorized`` / ``bs_memorized`` (those tests need the secret's prefix,
    which the scorer takes from the ground-truth canary).

    Threat model: a black-box querier who knows the canary's format (and, for RS / BS, a prefix of the
    secret).

    Args:
        beam_width: beam width of the extraction, an integer in [1, 10**6].
        top_k: how many guesses count for ``in_top_k`` / ``edit_distance``, an integer in [1, 10**6].
        n_samples: random completions of the RS test, an integer in [1, 10**8].

    Raises:
        InvalidArgument: an argument out of range; (``run``) not a :class:`BlackBoxLM` or no
            ``meta['canary_pattern']``.
    """

    paper = "unintended-memorization-under-fl.txt (RS / BS memorization tests; Carlini et al. 2019 extraction)"
    observation_type = BlackBoxLM
    threat_model = BLACK_BOX_CANARY
    headline_metric = "extracted"

    def __init__(self, beam_width: int = 32, top_k: int = 5, n_samples: int = 2000) -> None:
        check_range("beam_width", beam_width, 1, 10**6, integer=True)
        check_range("top_k", top_k, 1, 10**6, integer=True)
        check_range("n_samples", n_samples, 1, 10**8, integer=True)
        self.beam_width = beam_width
        self.top_k = top_k
        self.n_samples = n_samples

    @classmethod
    def example(cls, preset: str = "quick") -> CanaryExtraction:
        return cls(
            beam_width=32 if preset == "quick" else 128,
            n_samples=2000 if preset == "quick" else 20000,
        )

    def run(self, observation: BlackBoxLM, *, rng: Any) -> AttackResult:
        if not isinstance(observation, BlackBoxLM):
            raise InvalidArgument(
                f"canary_extraction needs a BlackBoxLM observation; got {type(observation).__name__}"
            )
        pattern = observation.meta.get("canary_pattern")
        if not pattern:
            raise InvalidArgument(
                "observation.meta['canary_pattern'] is required (the canary format)"
            )
        template = canary_template(
            pattern, observation.meta.get("canary_vocabulary") or observation.vocabulary
        )
        res = beam_extract(
            observation.model,
            observation.tokenizer,
            template,
            beam_width=self.beam_width,
            kind=observation.kind,
        )
        seed = int(as_numpy(rng).integers(0, 2**31 - 1))
        return AttackResult(
            attack=self.name,
            reconstructions=res.candidates,
            raw={
                "template": template,
                "log_perplexities": res.log_perplexities,
                "top_k": self.top_k,
                "model": observation.model,
                "tokenizer": observation.tokenizer,
                "kind": observation.kind,
                "n_samples": self.n_samples,
                "seed": seed,
            },
            scorer=_extraction_scorer,
        )
