"""Canaries in the secret-sharer format and their insertion at record or user level.

A canary is a pattern such as ``"my social security number is {ssn}"`` whose placeholders are
filled with a secret drawn uniformly from a known randomness space (Carlini et al., "The Secret
Sharer"; used for FL in ``../shared/papers/unintended-memorization-under-fl.txt``). Exposure
is ``log2 |space| - log2 rank(secret)``; :func:`enumerate_space` and :func:`sample_space` give
the candidates to rank against.

Placeholders: ``{ssn}`` (9 digits formatted ``ddd-dd-dddd``), ``{digits:N}`` (N digits),
``{words:N}`` (N words from ``vocabulary``, space-separated).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..core.errors import InvalidArgument, check_probability, check_range
from ..core.rng import as_numpy
from .corpus import PrivateCorpus, Record

__all__ = [
    "SecretSlot",
    "Canary",
    "CanaryInsertion",
    "make_canary",
    "enumerate_space",
    "sample_space",
    "insert_canaries",
    "DEFAULT_WORDS",
]

DEFAULT_WORDS: tuple[str, ...] = (
    "apple",
    "river",
    "stone",
    "cloud",
    "tiger",
    "piano",
    "garden",
    "silver",
    "rocket",
    "candle",
    "forest",
    "window",
    "orange",
    "bridge",
    "planet",
    "winter",
    "island",
    "dragon",
    "pencil",
    "mirror",
    "castle",
    "ocean",
    "thunder",
    "meadow",
    "lantern",
    "falcon",
    "velvet",
    "harbor",
    "copper",
    "maple",
    "violet",
    "arrow",
)

_PLACEHOLDER = re.compile(r"\{(ssn|digits:(\d+)|words:(\d+))\}")
_DIGITS = tuple("0123456789")


@dataclass(frozen=True)
class SecretSlot:
    """One placeholder: ``length`` symbols drawn uniformly from ``alphabet``.

    Attributes:
        kind: ``"ssn"``, ``"digits"`` or ``"words"`` (the placeholder it came from).
        length: the number of symbols (9 for ``ssn``; N for ``{digits:N}`` / ``{words:N}``, in [1, 64]).
        alphabet: the symbols each position draws from uniformly (digits, or the canary's word list).
    """

    kind: str  # "ssn" | "digits" | "words"
    length: int
    alphabet: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.alphabet) ** self.length

    def render(self, symbols: Sequence[str]) -> str:
        if self.kind == "ssn":
            s = "".join(symbols)
            return f"{s[:3]}-{s[3:5]}-{s[5:]}"
        if self.kind == "digits":
            return "".join(symbols)
        return " ".join(symbols)

    def describe(self) -> str:
        if self.kind == "ssn":
            return "ssn: 9 uniform digits formatted ddd-dd-dddd (10^9)"
        if self.kind == "digits":
            return f"digits:{self.length}: {self.length} uniform digits (10^{self.length})"
        return f"words:{self.length}: {self.length} uniform words from a {len(self.alphabet)}-word vocabulary"


@dataclass(frozen=True)
class Canary:
    """A filled canary: ``text`` is ``pattern`` with ``secret`` (``values`` per placeholder).

    Attributes:
        pattern: the template with placeholders.
        secret: the drawn secret, the rendered slots joined by spaces.
        text: ``pattern`` with the secret filled in (what is inserted into the data).
        randomness_space: a description of the space the secret was drawn from.
        space_size: the number of possible secrets (the product of the slots' sizes).
        slots: one :class:`SecretSlot` per placeholder, in order.
        values: the drawn symbols, one tuple per slot.

    Raises:
        InvalidArgument: (``render``) ``values`` does not have one entry per slot.
    """

    pattern: str
    secret: str
    text: str
    randomness_space: str
    space_size: int
    slots: tuple[SecretSlot, ...]
    values: tuple[tuple[str, ...], ...]

    @property
    def prefix(self) -> str:
        """The text before the first placeholder (what an exposure attack conditions on)."""
        m = _PLACEHOLDER.search(self.pattern)
        return self.pattern[: m.start()] if m else self.pattern

    def render(self, values: Sequence[Sequence[str]]) -> str:
        """The canary text with other ``values`` (one symbol sequence per slot)."""
        if len(values) != len(self.slots):
            raise InvalidArgument(
                f"values must have one entry per slot ({len(self.slots)}); got {len(values)}"
            )
        it = iter(zip(self.slots, values))

        def sub(_m: re.Match) -> str:
            slot, v = next(it)
            return slot.render(v)

        return _PLACEHOLDER.sub(sub, self.pattern)


@dataclass(frozen=True)
class CanaryInsertion:
    """Records with the canary inserted, plus which records/users received it.

    Attributes:
        records: all records, the ones that received the canary with it appended.
        inserted_ids: ids of the records that received it.
        inserted_users: ids of the users that received it.
        canary: the inserted canary.
        unit: ``"record"`` or ``"user"`` (how recipients were drawn).
        rate: the insertion probability per record or per user.
        repeats: copies per selected record, or records per selected user.
    """

    records: tuple[Record, ...]
    inserted_ids: tuple[str, ...]
    inserted_users: tuple[str, ...]
    canary: Canary
    unit: str
    rate: float
    repeats: int

    def __iter__(self):
        """Unpacks as ``records, inserted_ids = insert_canaries(...)``."""
        return iter((self.records, self.inserted_ids))

    def corpus(self) -> PrivateCorpus:
        return PrivateCorpus(self.records)


def _parse(pattern: str, vocabulary: Sequence[str]) -> tuple[SecretSlot, ...]:
    if not isinstance(pattern, str):
        raise InvalidArgument(f"pattern must be a string; got {type(pattern).__name__}")
    slots = []
    for m in _PLACEHOLDER.finditer(pattern):
        if m.group(1) == "ssn":
            slots.append(SecretSlot("ssn", 9, _DIGITS))
        elif m.group(2) is not None:
            slots.append(
                SecretSlot(
                    "digits",
                    check_range("{digits:N}", int(m.group(2)), 1, 64, integer=True),
                    _DIGITS,
                )
            )
        else:
            slots.append(
                SecretSlot(
                    "words",
                    check_range("{words:N}", int(m.group(3)), 1, 64, integer=True),
                    tuple(vocabulary),
                )
            )
    if not slots:
        raise InvalidArgument(
            f"pattern must contain a placeholder {{ssn}}, {{digits:N}} or {{words:N}}; got {pattern!r}"
        )
    leftover = re.sub(_PLACEHOLDER, "", pattern)
    if re.search(r"\{[^}]*\}", leftover):
        raise InvalidArgument(
            f"pattern has an unknown placeholder; allowed: {{ssn}}, {{digits:N}}, {{words:N}}: {pattern!r}"
        )
    return tuple(slots)


def make_canary(
    pattern: str = "my social security number is {ssn}",
    *,
    rng,
    vocabulary: Sequence[str] | None = None,
) -> Canary:
    """Fill ``pattern`` with a secret drawn uniformly from its randomness space.

    Args:
        pattern: text with placeholders ``{ssn}``, ``{digits:N}`` or ``{words:N}``; they define the
            randomness space (the exposure of the canary is measured against it).
        rng: ``numpy.random.Generator`` or seed (keyword-only).
        vocabulary: the words a ``{words:N}`` placeholder draws from (at least 2 distinct words); default
            ``DEFAULT_WORDS``.

    Returns:
        A :class:`Canary` (``secret``, ``text``, ``space_size``, ``slots``).

    Raises:
        InvalidArgument: a pattern without a known placeholder, or a vocabulary with fewer than 2 distinct
            words.
    """
    vocab = tuple(DEFAULT_WORDS if vocabulary is None else vocabulary)
    if len(vocab) < 2 or len(set(vocab)) != len(vocab):
        raise InvalidArgument("vocabulary must hold at least 2 distinct words")
    slots = _parse(pattern, vocab)
    g = as_numpy(rng)
    values = tuple(
        tuple(s.alphabet[i] for i in g.integers(0, len(s.alphabet), size=s.length)) for s in slots
    )
    proto = Canary(
        pattern=pattern,
        secret="",
        text="",
        randomness_space="; ".join(s.describe() for s in slots),
        space_size=math.prod(s.size for s in slots),
        slots=slots,
        values=values,
    )
    secret = " ".join(s.render(v) for s, v in zip(slots, values))
    return replace(proto, secret=secret, text=proto.render(values))


def enumerate_space(canary: Canary, *, limit: int = 10**6) -> Iterator[str]:
    """Every candidate text of the randomness space, in lexicographic order (secret included).

    Args:
        canary: the canary whose randomness space is enumerated.
        limit: the largest space size accepted.

    Yields:
        Candidate texts (the canary's pattern with every combination of slot values).

    Raises:
        InvalidArgument: the space has more than ``limit`` candidates (raised on the first ``next``).
    """
    if canary.space_size > limit:
        raise InvalidArgument(
            f"the randomness space has {canary.space_size} candidates, above limit={limit}; "
            "use sample_space or raise limit"
        )
    per_slot = [itertools.product(s.alphabet, repeat=s.length) for s in canary.slots]
    for combo in itertools.product(*[list(p) for p in per_slot]):
        yield canary.render(combo)


def sample_space(canary: Canary, n: int, *, rng, exclude_secret: bool = True) -> list[str]:
    """``n`` candidate texts drawn uniformly (with replacement) from the randomness space.

    Args:
        canary: the canary whose randomness space is sampled.
        n: the number of candidates, an integer in [0, 10**8].
        rng: ``numpy.random.Generator`` or seed (keyword-only).
        exclude_secret: redraw whenever the canary's own secret comes up.

    Returns:
        ``n`` candidate texts (duplicates possible).

    Raises:
        InvalidArgument: ``n`` out of range.
    """
    check_range("n", n, 0, 10**8, integer=True)
    g = as_numpy(rng)
    out: list[str] = []
    while len(out) < n:
        vals = tuple(
            tuple(s.alphabet[i] for i in g.integers(0, len(s.alphabet), size=s.length))
            for s in canary.slots
        )
        if exclude_secret and vals == canary.values:
            continue
        out.append(canary.render(vals))
    return out


def _append(rec: Record, canary: Canary, times: int) -> Record:
    sep = "" if rec.text.endswith((" ", "\n")) else " "
    return replace(rec, text=rec.text + sep + " ".join([canary.text] * times))


def insert_canaries(
    records, canary: Canary, *, rate: float, unit: str = "record", repeats: int = 1, rng
) -> CanaryInsertion:
    """Insert ``canary`` into ``records`` (a :class:`PrivateCorpus` or a sequence of :class:`Record`).

    ``unit="record"``: every record independently receives the canary with probability ``rate``
    (appended ``repeats`` times to its text). ``unit="user"``: every user independently is
    selected with probability ``rate``; a selected user gets the canary appended to ``repeats``
    of their records (all of them if they have fewer), chosen uniformly. Existing spans are
    unchanged (text is only appended).

    Args:
        records: a :class:`PrivateCorpus` or a sequence of :class:`Record`.
        canary: from :func:`make_canary`.
        rate: insertion probability per record or per user (``unit``), in [0, 1].
        unit: ``"record"`` or ``"user"``.
        repeats: copies per selected record / records per selected user, in [1, 10**6].
        rng: ``numpy.random.Generator`` or seed (keyword-only).

    Returns:
        :class:`CanaryInsertion` with the new records and the ids of the records / users that received it.

    Raises:
        InvalidArgument: ``records`` of the wrong type, ``rate`` outside [0, 1], ``repeats`` out of range or
            an unknown ``unit``.
    """
    recs = tuple(records.records if isinstance(records, PrivateCorpus) else records)
    if not all(isinstance(r, Record) for r in recs):
        raise InvalidArgument("records must be a PrivateCorpus or a sequence of Record")
    check_probability("rate", rate)
    check_range("repeats", repeats, 1, 10**6, integer=True)
    if unit not in ("record", "user"):
        raise InvalidArgument(f"unit must be 'record' or 'user'; got {unit!r}")
    g = as_numpy(rng)
    chosen: dict[int, int] = {}
    if unit == "record":
        mask = g.random(len(recs)) < rate
        for i in np.flatnonzero(mask):
            chosen[int(i)] = int(repeats)
    else:
        users: dict[str, list[int]] = {}
        for i, r in enumerate(recs):
            users.setdefault(r.user_id, []).append(i)
        mask = g.random(len(users)) < rate
        for sel, idx in zip(mask, users.values()):
            if sel:
                k = min(int(repeats), len(idx))
                for i in g.choice(idx, size=k, replace=False):
                    chosen[int(i)] = 1
    out = tuple(_append(r, canary, chosen[i]) if i in chosen else r for i, r in enumerate(recs))
    ids = tuple(recs[i].id for i in sorted(chosen))
    users_in = tuple(dict.fromkeys(recs[i].user_id for i in sorted(chosen)))
    return CanaryInsertion(
        records=out,
        inserted_ids=ids,
        inserted_users=users_in,
        canary=canary,
        unit=unit,
        rate=float(rate),
        repeats=int(repeats),
    )
