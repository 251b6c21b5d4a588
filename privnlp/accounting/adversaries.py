"""Who sees what: the per-adversary bounds (:class:`~privnlp.core.claims.AdversaryBound`) of every DP
mechanism family the ledger accounts, and their basic composition.

* central DP-SGD (:func:`dp_sgd_adversary_bounds`): Poisson sampling is done by the trainer and no named
  adversary sees which examples were sampled (the gradient observer sees noised sums, the querier the
  model), so every adversary gets the amplified epsilon; with a shuffled / fixed-size loader nobody
  gets amplification (the no-amplification epsilon, ``amplified=False``).
* DP-FedAvg: :func:`privnlp.accounting.federated.dp_fedavg_adversary_bounds` (the server and the
  eavesdropper see the selection: no amplification).
* DP vocabulary (:func:`vocab_adversary_bounds`): the recipient of the released vocabulary and its
  noisy histogram, and whoever gets a model shipped with that tokenizer, see the same released
  histogram (post-processing): the same (epsilon, delta), no sampling.
* local metric-DP text (:func:`metric_dp_adversary_bounds`): the recipient of the sanitized text;
  epsilon per unit of the word metric, delta 0.

Bounds of several components on the same data compose by basic composition
(:func:`compose_adversary_bounds`): epsilons and deltas add, per adversary.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from privnlp.core.claims import Adversary, AdversaryBound
from privnlp.core.errors import InvalidPrivacyParameter

__all__ = [
    "DP_SGD_ADVERSARIES",
    "VOCAB_ADVERSARIES",
    "METRIC_DP_ADVERSARIES",
    "dp_sgd_adversary_bounds",
    "vocab_adversary_bounds",
    "metric_dp_adversary_bounds",
    "compose_adversary_bounds",
]

#: central DP-SGD's adversaries when the mechanism names none: (adversary, what it observes)
DP_SGD_ADVERSARIES: tuple[tuple[str, str], ...] = (
    (
        Adversary.WHITE_BOX_ANALYST.value,
        "every noised model update of training and the released model, not which examples were sampled",
    ),
    (Adversary.BLACK_BOX_QUERIER.value, "the released model's outputs (log-probabilities)"),
)
#: the DP vocabulary's adversaries when the mechanism names none
VOCAB_ADVERSARIES: tuple[tuple[str, str], ...] = (
    (
        Adversary.DATA_RECIPIENT.value,
        "the released WordPiece vocabulary (tokenizer.json, vocab.txt) and the noisy word histogram",
    ),
    (
        Adversary.MODEL_OBSERVER.value,
        "the tokenizer shipped with any model trained with the released vocabulary",
    ),
)
#: local metric-DP text's adversary when the mechanism names none
METRIC_DP_ADVERSARIES: tuple[tuple[str, str], ...] = (
    (Adversary.DATA_RECIPIENT.value, "the sanitized text (every perturbed word of every record)"),
)


def _named(
    threat_models: Iterable[Any] | None, default: tuple[tuple[str, str], ...]
) -> list[tuple[str, str]]:
    """(adversary, observes) of ``threat_models`` (:class:`~privnlp.core.claims.ThreatModel`), or ``default``;
    one entry per adversary (the observations of repeated adversaries joined)."""
    if not threat_models:
        return list(default)
    out: dict[str, list[str]] = {}
    for t in threat_models:
        seen = out.setdefault(t.adversary.value, [])
        seen.extend(o for o in t.observes if o not in seen)
    return [(a, ", ".join(obs)) for a, obs in out.items()]


def dp_sgd_adversary_bounds(
    *,
    epsilon: float,
    delta: float,
    accountant: str,
    poisson_sampling: bool = True,
    epsilon_no_amplification: float | None = None,
    threat_models: Sequence[Any] | None = None,
) -> tuple[AdversaryBound, ...]:
    """Central DP-SGD's bound against each adversary (see the module docstring).

    Args:
        epsilon: the ledger's reported epsilon at ``delta`` (amplified by Poisson sampling).
        delta: the delta of the claim.
        accountant: how ``epsilon`` was computed (e.g. :data:`privnlp.accounting.REPORTED` ``["prv"]``).
        poisson_sampling: whether the steps used Poisson sampling; ``False``: every adversary gets
            ``epsilon_no_amplification`` (required then), labelled not amplified.
        epsilon_no_amplification: the ledger's no-amplification epsilon at ``delta``.
        threat_models: the mechanism's threat models (their adversaries are named); ``None`` or empty:
            :data:`DP_SGD_ADVERSARIES`.

    Returns:
        One bound per named adversary, all with the same epsilon.

    Raises:
        InvalidPrivacyParameter: ``poisson_sampling=False`` without ``epsilon_no_amplification``.
    """
    if poisson_sampling:
        eps, amp, acc = float(epsilon), True, accountant
        note = "amplified by Poisson sampling of examples, which no named adversary observes"
    else:
        if epsilon_no_amplification is None:
            raise InvalidPrivacyParameter(
                "epsilon_no_amplification is required when poisson_sampling=False"
            )
        eps, amp = float(epsilon_no_amplification), False
        acc = "dp_accounting analytic Gaussian (no amplification)"
        note = "shuffled / fixed-size batches: no amplification by sampling is claimed"
    return tuple(
        AdversaryBound(adv, obs, eps, float(delta), acc, amp, note)
        for adv, obs in _named(threat_models, DP_SGD_ADVERSARIES)
    )


def vocab_adversary_bounds(
    *,
    epsilon: float,
    delta: float,
    noise: str,
    releases: int = 1,
    threat_models: Sequence[Any] | None = None,
) -> tuple[AdversaryBound, ...]:
    """The DP vocabulary's bound against each adversary who sees the released vocabulary.

    Args:
        epsilon, delta: the (composed) guarantee of the releases.
        noise: ``"laplace"`` or ``"gaussian"`` (named in the accountant).
        releases: how many releases were composed (stated in the note).
        threat_models: the mechanism's threat models; ``None`` or empty: :data:`VOCAB_ADVERSARIES`.

    Returns:
        One bound per named adversary, all with the same (epsilon, delta), not amplified.
    """
    acc = f"{noise} thresholding (partition selection)"
    note = "the vocabulary and tokenizer are post-processing of the released histogram" + (
        f"; {int(releases)} releases, basic composition" if releases > 1 else ""
    )
    return tuple(
        AdversaryBound(adv, obs, float(epsilon), float(delta), acc, False, note)
        for adv, obs in _named(threat_models, VOCAB_ADVERSARIES)
    )


def metric_dp_adversary_bounds(
    *,
    epsilon: float,
    metric: str,
    words: int = 1,
    releases: int = 1,
    threat_models: Sequence[Any] | None = None,
) -> tuple[AdversaryBound, ...]:
    """Local metric-DP text's bound against each adversary who sees the sanitized text: epsilon per unit
    of ``d_metric`` per word (delta 0); over the words of a record the epsilons add.

    Args:
        epsilon: the per-word metric-DP epsilon, composed over ``releases`` passes.
        metric: the word metric.
        words: the most words of one record (the record-level factor is stated in the note).
        releases: how many passes over the same records were composed.
        threat_models: the mechanism's threat models; ``None`` or empty: :data:`METRIC_DP_ADVERSARIES`.
    """
    note = (
        f"epsilon * d_{metric}(x, x') per word; "
        + (
            f"a record of n <= {int(words)} words: epsilon * sum_i d(x_i, x'_i) (additive over its words)"
            if int(words) > 1
            else "over the words of a record the epsilons add (epsilon * sum_i d(x_i, x'_i))"
        )
        + (
            f"; {int(releases)} passes over the same records, epsilons added"
            if releases > 1
            else ""
        )
    )
    return tuple(
        AdversaryBound(
            adv, obs, float(epsilon), 0.0, "metric-DP composition (additive)", False, note
        )
        for adv, obs in _named(threat_models, METRIC_DP_ADVERSARIES)
    )


def compose_adversary_bounds(
    components: Sequence[tuple[str, Sequence[AdversaryBound]]],
) -> tuple[AdversaryBound, ...]:
    """Basic composition of several mechanisms' bounds on the same data: every adversary named by any
    component is charged every component (its own bound where that component names it, else the
    component's strongest: never less than it may see); epsilons and deltas add.

    Args:
        components: ``(name, bounds)`` per component (e.g. ``("DP-SGD steps", ...)``).

    Returns:
        One bound per adversary named anywhere, in first-seen order.
    """
    comps = [(name, tuple(b)) for name, b in components if b]
    if len(comps) == 1:
        return comps[0][1]
    order: dict[str, str] = {}
    for _, bounds in comps:
        for b in bounds:
            order.setdefault(b.adversary, b.observes)
    out = []
    for adv, obs in order.items():
        eps = dlt = 0.0
        amp = False
        parts = []
        for name, bounds in comps:
            own = [b for b in bounds if b.adversary == adv]
            b = own[0] if own else max(bounds, key=lambda x: x.epsilon)
            eps += b.epsilon
            dlt += b.delta
            amp = amp or b.amplified
            parts.append(f"{name}: ({b.epsilon:.4g}, {b.delta:.3g}) {b.accountant}")
        out.append(
            AdversaryBound(
                adv, obs, eps, dlt, "basic composition", amp, "sum of " + "; ".join(parts)
            )
        )
    return tuple(out)
