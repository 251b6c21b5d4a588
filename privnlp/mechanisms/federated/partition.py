"""Partitioning records into federated users: natural (non-IID), IID with the same sizes, Dirichlet.

Paper: ``../shared/papers/unintended-memorization-under-fl.txt`` (Sec. 3: "non-IID" = the real
users of the data set; "IID" = records shuffled and assigned sequentially to synthetic users with the
same number of records). The Dirichlet partition (label skew over record kinds, Hsu et al. 2019) is
the usual knob between the two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privnlp.core.errors import InvalidArgument, check_positive, check_range
from privnlp.core.rng import as_numpy

__all__ = ["Partition", "partition_natural", "partition_iid", "partition_dirichlet", "partition"]


@dataclass(frozen=True)
class Partition:
    """``clients[id] = tuple of records`` (insertion order = client order).

    Attributes:
        clients: client id -> its records.
        scheme: ``"natural"``, ``"iid"`` or ``"dirichlet(alpha=...)"``.
    """

    clients: Mapping[str, tuple[Any, ...]]
    scheme: str

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def sizes(self) -> list[int]:
        return [len(v) for v in self.clients.values()]


def partition_natural(
    records: Sequence[Any], *, key: Callable[[Any], str] = lambda r: r.user_id
) -> Partition:
    """One client per natural user (``record.user_id``): the non-IID setting.

    Args:
        records: the records (not empty).
        key: record -> user id.

    Returns:
        One client per user.

    Raises:
        InvalidArgument: ``records`` is empty.
    """
    out: dict[str, list[Any]] = {}
    for r in records:
        out.setdefault(str(key(r)), []).append(r)
    if not out:
        raise InvalidArgument("records must not be empty")
    return Partition({k: tuple(v) for k, v in out.items()}, "natural")


def partition_iid(
    records: Sequence[Any],
    *,
    rng: Any,
    sizes: Sequence[int] | None = None,
    key: Callable[[Any], str] = lambda r: r.user_id,
) -> Partition:
    """Shuffle the records and assign them sequentially to synthetic users with the natural users'
    sizes (or ``sizes``): IID users, same size distribution.

    Args:
        records: the records.
        rng: shuffling randomness (keyword-only).
        sizes: client sizes summing to ``len(records)`` (default: the natural users' sizes).
        key: record -> user id (for the default sizes).

    Returns:
        Clients ``iid-0000``, ``iid-0001``, ...

    Raises:
        InvalidArgument: ``sizes`` do not sum to the number of records.
    """
    if sizes is None:
        sizes = partition_natural(records, key=key).sizes()
    if sum(sizes) != len(records):
        raise InvalidArgument(
            f"sizes must sum to the number of records ({len(records)}); got {sum(sizes)}"
        )
    order = as_numpy(rng).permutation(len(records))
    out, i = {}, 0
    for j, s in enumerate(sizes):
        out[f"iid-{j:04d}"] = tuple(records[k] for k in order[i : i + s])
        i += s
    return Partition(out, "iid")


def partition_dirichlet(
    records: Sequence[Any],
    num_clients: int,
    *,
    alpha: float,
    rng: Any,
    label: Callable[[Any], str] = lambda r: r.kind,
    min_size: int = 1,
) -> Partition:
    """Label-skewed partition: for every label, split its records among clients with proportions drawn
    from Dirichlet(alpha); small ``alpha`` = very non-IID. Every client gets at least ``min_size``
    records (redrawn up to 100 times).

    Args:
        records: the records.
        num_clients: the number of clients, an integer in [1, len(records)].
        alpha: the Dirichlet concentration; > 0.
        rng: randomness (keyword-only).
        label: record -> label (default: ``record.kind``).
        min_size: the least number of records per client.

    Returns:
        Clients ``dir-0000``, ``dir-0001``, ...

    Raises:
        InvalidArgument: an argument out of range, or no draw in 100 gave every client ``min_size`` records.
    """
    check_range("num_clients", num_clients, 1, max(1, len(records)), integer=True)
    check_positive("alpha", alpha)
    g = as_numpy(rng)
    by_label: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_label.setdefault(str(label(r)), []).append(i)
    for _ in range(100):
        buckets: list[list[int]] = [[] for _ in range(num_clients)]
        for lab in sorted(by_label):
            idx = np.array(by_label[lab])
            g.shuffle(idx)
            p = g.dirichlet([alpha] * num_clients)
            cuts = (np.cumsum(p) * len(idx)).astype(int)[:-1]
            for c, part in enumerate(np.split(idx, cuts)):
                buckets[c].extend(part.tolist())
        if min(len(b) for b in buckets) >= min_size:
            break
    else:
        raise InvalidArgument(
            f"could not give every one of {num_clients} clients >= {min_size} records with "
            f"alpha={alpha}; use fewer clients or a larger alpha"
        )
    return Partition(
        {f"dir-{c:04d}": tuple(records[i] for i in sorted(b)) for c, b in enumerate(buckets)},
        f"dirichlet(alpha={alpha})",
    )


def partition(
    records: Sequence[Any],
    scheme: str = "natural",
    *,
    rng: Any = None,
    num_clients: int | None = None,
    alpha: float = 0.5,
) -> Partition:
    """Dispatch: ``natural`` | ``iid`` | ``dirichlet``.

    Args:
        records: the records.
        scheme: ``"natural"``, ``"iid"`` or ``"dirichlet"``.
        rng: randomness (``iid`` / ``dirichlet``).
        num_clients: the number of clients for ``dirichlet`` (default: the number of natural users).
        alpha: the Dirichlet concentration for ``dirichlet``; > 0.

    Returns:
        The partition.

    Raises:
        InvalidArgument: unknown ``scheme`` (or an argument of the chosen scheme out of range).
    """
    if scheme == "natural":
        return partition_natural(records)
    if scheme == "iid":
        return partition_iid(records, rng=rng)
    if scheme == "dirichlet":
        n = num_clients if num_clients is not None else len(partition_natural(records).clients)
        return partition_dirichlet(records, n, alpha=alpha, rng=rng)
    raise InvalidArgument(f"scheme must be 'natural', 'iid' or 'dirichlet'; got {scheme!r}")
