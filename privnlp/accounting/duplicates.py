"""Duplicates under example-level DP: counting copies and the group epsilon of k copies.

An (epsilon, delta)-DP guarantee "per example" protects one *row*. A record present k times is k rows,
so it is only protected at group size k (roughly k*epsilon; measured in issue #15: a canary present 8
times stays at maximal exposure under DP-SGD at epsilon 4). This module counts exact duplicates (and
cheap near duplicates: the same text up to whitespace and case) and computes the group epsilon
properly instead of the generic k*epsilon bound.

Group epsilon of k copies (``group_epsilon``), the method: under Poisson sampling each copy is sampled
independently with probability q; the group's contribution to a step is ``j*C`` with ``j ~ Bin(k, q)``.
The pair (without the group, with it) is dominated by a Poisson-subsampled Gaussian with sampling
probability ``q_k = 1 - (1 - q)^k`` (some copy is sampled) and sensitivity ``k*C`` (all copies sampled,
the worst case), i.e. noise multiplier ``sigma / k``: hockey-stick divergences are jointly convex and
grow with the Gaussian's shift. That event is accounted with the *same* accountant (dp_accounting
PLD / RDP) at the same delta. Without Poisson sampling the no-amplification bound with ``sigma / k``
is used. Paper: ``../shared/papers/dp-bert-and-dp-wordpiece.txt`` (DP-SGD); group privacy: Dwork &
Roth 2014, Sec. 2.3. Written by hand: counting and the event transformation (no library does it).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, check_range

__all__ = [
    "DuplicateExamplesWarning",
    "DuplicateReport",
    "find_duplicates",
    "row_keys",
    "normalize_text",
    "group_epsilon",
    "group_runs",
    "duplicate_message",
]


class DuplicateExamplesWarning(UserWarning):
    """Training data holds copies of a record: its guarantee is the group epsilon, not epsilon."""


def normalize_text(text: str) -> str:
    """Cheap near-duplicate key: lower case, whitespace runs collapsed, ends stripped."""
    return " ".join(str(text).lower().split())


def row_keys(tensors: Sequence[Any]) -> list[bytes]:
    """One hashable key per example of aligned tensors/arrays (first dimension = examples): the digest of
    the example's bytes in every tensor (exact-duplicate detection for a ``TensorDataset``).

    Args:
        tensors: aligned tensors or arrays whose first dimension indexes the examples.

    Returns:
        One 16-byte blake2b digest per example.
    """

    arrays = []
    for t in tensors:
        if hasattr(t, "detach"):
            t = t.detach().cpu()
            # numpy has no bfloat16: widen to float32 (exact: every bfloat16 value is a float32 value)
            a = t.float().numpy() if str(t.dtype) == "torch.bfloat16" else t.numpy()
        else:
            a = np.asarray(t)
        arrays.append(np.ascontiguousarray(a.reshape(a.shape[0], -1)))
    n = arrays[0].shape[0] if arrays else 0
    keys = []
    for i in range(n):
        h = hashlib.blake2b(digest_size=16)
        for a in arrays:
            h.update(a[i].tobytes())
        keys.append(h.digest())
    return keys


@dataclass(frozen=True)
class DuplicateReport:
    """How many examples are copies of one another.

    ``max_copies`` is k, the largest multiplicity (1 = no duplicates); ``duplicated_examples`` counts every
    example whose key occurs more than once; ``groups`` the keys that do; ``keep`` the indices of the
    first occurrence of each key (what ``dedup=True`` trains on); ``method`` how keys were built.

    Attributes:
        n: the number of examples inspected.
        n_unique: the number of distinct keys.
        max_copies: k, the largest multiplicity of a key (1 = no duplicates).
        duplicated_examples: the number of examples whose key occurs more than once.
        groups: the number of distinct keys that occur more than once.
        method: how keys were built (``"exact"``, ``"normalized (whitespace/case)"`` or the caller's name).
        keep: the index of the first occurrence of each key, in order.
    """

    n: int
    n_unique: int
    max_copies: int
    duplicated_examples: int
    groups: int
    method: str
    keep: tuple[int, ...]

    @property
    def has_duplicates(self) -> bool:
        return self.max_copies > 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "n_unique": self.n_unique,
            "max_copies": self.max_copies,
            "duplicated_examples": self.duplicated_examples,
            "groups": self.groups,
            "method": self.method,
        }


def find_duplicates(
    items: Iterable[Any],
    *,
    normalize: Callable[[Any], Any] | None = None,
    method: str | None = None,
) -> DuplicateReport:
    """Count duplicates among ``items`` (strings, bytes or any hashables; ``normalize`` maps each item to
    its key first, e.g. :func:`normalize_text` for near-duplicate texts).

    Args:
        items: the examples (strings, bytes, or any hashables such as :func:`row_keys` digests).
        normalize: maps each item to its key before counting (``None`` = the item itself).
        method: the name stored in :attr:`DuplicateReport.method` (default: derived from ``normalize``).

    Returns:
        The counts and the indices of first occurrences.
    """
    keys = [normalize(x) if normalize is not None else x for x in items]
    counts = Counter(keys)
    seen: set = set()
    keep = []
    for i, k in enumerate(keys):
        if k not in seen:
            seen.add(k)
            keep.append(i)
    multi = [c for c in counts.values() if c > 1]
    return DuplicateReport(
        n=len(keys),
        n_unique=len(counts),
        max_copies=max(counts.values(), default=1),
        duplicated_examples=sum(multi),
        groups=len(multi),
        method=method
        or ("normalized (whitespace/case)" if normalize is normalize_text else "exact"),
        keep=tuple(keep),
    )


def group_runs(runs: Iterable[Any], k: int) -> list[tuple[float, float, int]]:
    """The ledger runs ``(sigma, q, steps)`` transformed for a group of ``k`` copies:
    ``(sigma / k, 1 - (1 - q)^k, steps)`` (see the module docstring).

    Args:
        runs: the ledger runs, :class:`~privnlp.accounting.LedgerRun` or ``(sigma, q, steps)`` tuples.
        k: the group size; an integer >= 1.

    Returns:
        The transformed runs ``(sigma / k, 1 - (1 - q)^k, steps)``.

    Raises:
        InvalidArgument: ``k`` is not an integer >= 1.
    """
    # deferred: .ledger pulls dp_accounting + scipy (~1 s) and the CLI imports this module at its top
    from .ledger import normalise_runs

    check_range("k (group size)", k, 1, math.inf, integer=True)
    return [(s / k, 1.0 - (1.0 - q) ** k, n) for s, q, n in normalise_runs(runs)]


def group_epsilon(
    runs: Iterable[Any],
    k: int,
    delta: float,
    accountant: str = "prv",
    *,
    poisson_sampling: bool = True,
) -> float:
    """Epsilon at ``delta`` of ``k`` identical records (group privacy) for DP-SGD ``runs``, with the same
    accountant as the example-level epsilon (sensitivity-k Gaussian, see the module docstring).

    Args:
        runs: the DP-SGD ledger runs, :class:`~privnlp.accounting.LedgerRun` or ``(sigma, q, steps)`` tuples.
        k: the number of identical copies (group size); ``k <= 1`` gives the example-level epsilon.
        delta: the target delta, in (0, 1).
        accountant: ``"prv"`` or ``"rdp"`` (as for :func:`~privnlp.accounting.epsilon_for`).
        poisson_sampling: whether the steps used Poisson sampling; ``False`` uses the no-amplification
            bound with ``sigma / k``.

    Returns:
        The group epsilon of ``k`` copies at ``delta``.

    Raises:
        InvalidArgument: unknown ``accountant``.
        InvalidPrivacyParameter: ``delta`` outside (0, 1).
    """
    # deferred: see group_runs
    from .ledger import epsilon_for, epsilon_no_amplification, normalise_runs

    runs = list(runs)
    if k <= 1:
        return epsilon_for(runs, delta, accountant).epsilon
    if not poisson_sampling:
        return epsilon_no_amplification([(s / k, q, n) for s, q, n in normalise_runs(runs)], delta)
    return epsilon_for(group_runs(runs, k), delta, accountant).epsilon


def duplicate_message(
    rep: DuplicateReport,
    *,
    epsilon: float | None = None,
    group_eps: float | None = None,
    delta: float | None = None,
    where: str = "the training data",
) -> str:
    """The warning text: the count, the effective group epsilon, and the two ways out.

    Args:
        rep: the duplicate counts.
        epsilon: the example-level epsilon, quoted for comparison (optional).
        group_eps: the group epsilon of ``rep.max_copies`` copies (optional).
        delta: the delta of both epsilons (optional).
        where: how the data is named in the message.

    Returns:
        One line of text.
    """
    if not rep.has_duplicates:
        return f"{where}: no duplicate examples ({rep.method})"
    s = (
        f"{where}: {rep.duplicated_examples} of {rep.n} examples are {rep.method} duplicates "
        f"({rep.groups} distinct records repeated, up to k={rep.max_copies} copies)"
    )
    if group_eps is not None:
        s += (
            f"; a record with k={rep.max_copies} copies is only protected at group size k: epsilon "
            f"{group_eps:.4g}"
            + (f" instead of {epsilon:.4g}" if epsilon is not None else "")
            + (f" at delta={delta:.3g}" if delta is not None else "")
            + " (sensitivity-k Gaussian, sigma/k, same accountant)"
        )
    s += (
        "; pass dedup=True to train on one copy of each, or account at the user level (unit='user')"
    )
    return s


def check_dedup(dedup: Any) -> bool:
    if not isinstance(dedup, bool):
        raise InvalidArgument(f"dedup must be True or False; got {dedup!r}")
    return dedup
