"""Privacy claims and threat models.

A :class:`PrivacyClaim` says what guarantee a mechanism gives and at which unit. It is never
silently empty: a mechanism without a formal guarantee says ``kind="heuristic"``; an
undefended baseline says ``kind="none"``.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from .errors import InvalidPrivacyParameter

__all__ = [
    "ClaimKind",
    "PrivacyUnit",
    "PrivacyClaim",
    "AdversaryBound",
    "Adversary",
    "ThreatModel",
    "SEEDED_NOISE_NOTE",
]

#: appended to the statement of a claim whose privacy noise came from a user-given seed / Generator
SEEDED_NOISE_NOTE = "noise seeded: not private against anyone who knows the seed"


class ClaimKind(str, enum.Enum):
    """What kind of guarantee a :class:`PrivacyClaim` states.

    ``DP``: (epsilon, delta)-DP at the claim's unit; ``METRIC_DP``: epsilon * d(x, x') metric DP w.r.t. the
    claim's metric; ``CRYPTOGRAPHIC``: secure computation (the notes say under which assumptions);
    ``HEURISTIC``: no formal guarantee (pruning, fragmentation, freezing); ``NONE``: the undefended baseline.
    """

    DP = "dp"  # (epsilon, delta)-DP at ``unit``
    METRIC_DP = "metric_dp"  # epsilon * d(x, x') metric DP w.r.t. ``metric``
    CRYPTOGRAPHIC = "cryptographic"  # secure computation (semi-honest etc.), see notes
    HEURISTIC = "heuristic"  # no formal guarantee (pruning, fragmentation, freezing)
    NONE = "none"  # undefended baseline


class PrivacyUnit(str, enum.Enum):
    """What one "neighbouring" change of the data is: a token, a word, a record, a training example, a
    document, a user, a metric-DP input (``METRIC``) or a whole text.
    """

    TOKEN = "token"
    WORD = "word"
    RECORD = "record"
    EXAMPLE = "example"
    DOCUMENT = "document"
    USER = "user"
    METRIC = "metric"
    TEXT = "text"


def _eps_text(eps: float | None) -> str:
    if eps is None:
        return "-"
    return "inf" if math.isinf(eps) else f"{eps:.4g}"


@dataclass(frozen=True)
class AdversaryBound:
    """The (epsilon, delta) guarantee against ONE adversary a threat model names.

    Different adversaries observe different things (the DP-FedAvg server sees which users it selected,
    an observer of the released models does not), so one mechanism can give each a different epsilon.
    A :class:`PrivacyClaim` lists them in ``adversaries`` and headlines the largest (the strongest
    named adversary).

    Attributes:
        adversary: who (a value of :class:`Adversary` where one fits, e.g. ``"honest-but-curious
            server"``; otherwise a short phrase such as ``"observer of the released models"``).
        observes: what it sees, in words (``"every noised aggregate and the selection log"``).
        epsilon, delta: the guarantee against it (epsilon in [0, inf], delta in [0, 1)).
        accountant: how epsilon was computed (``"dp_accounting PLD"``, ...).
        amplified: ``True`` when epsilon uses privacy amplification by sampling (only sound against an
            adversary who does not see the sample).
        note: how the bound was obtained (e.g. the tail bound on participations charged to delta).

    Raises:
        InvalidPrivacyParameter: epsilon not in [0, inf] or delta not in [0, 1); an empty ``adversary``.
    """

    adversary: str
    observes: str
    epsilon: float
    delta: float
    accountant: str
    amplified: bool
    note: str = ""

    def __post_init__(self) -> None:
        adv = self.adversary.value if isinstance(self.adversary, Adversary) else self.adversary
        if not isinstance(adv, str) or not adv.strip():
            raise InvalidPrivacyParameter(
                f"adversary must be a non-empty string (an Adversary value where one fits); got {adv!r}"
            )
        object.__setattr__(self, "adversary", adv)
        eps = float(self.epsilon)
        if not (eps >= 0):
            raise InvalidPrivacyParameter(
                f"epsilon of the bound against {adv!r} must be in [0, inf]; got {self.epsilon!r}"
            )
        d = float(self.delta)
        if not (0.0 <= d < 1.0):
            raise InvalidPrivacyParameter(
                f"delta of the bound against {adv!r} must be in [0, 1); got {self.delta!r}"
            )
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", d)
        object.__setattr__(self, "amplified", bool(self.amplified))

    @classmethod
    def same_for(
        cls,
        threat_models: Any,
        epsilon: float,
        delta: float,
        accountant: str,
        amplified: bool,
        note: str = "",
    ) -> tuple[AdversaryBound, ...]:
        """One bound per adversary of ``threat_models`` (:class:`ThreatModel`), all with the same
        guarantee: for a mechanism whose output is all that any of them sees (central DP-SGD, a DP
        vocabulary, a sanitizer). ``amplified``: epsilon uses amplification by a sampling that none of
        them observes."""
        return tuple(
            cls(
                t.adversary.value,
                ", ".join(t.observes),
                epsilon,
                delta,
                accountant,
                amplified,
                note,
            )
            for t in threat_models
        )

    def describe(self) -> str:
        """One line: who, what it sees, (epsilon, delta), amplified or not, and the note."""
        s = (
            f"{self.adversary} (observes {self.observes}): ({_eps_text(self.epsilon)}, "
            f"{self.delta:.3g})-DP, {'amplified by sampling' if self.amplified else 'no amplification'}"
            f", {self.accountant}"
        )
        return s + (f"; {self.note}" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AdversaryBound:
        d = dict(d)
        for k in ("epsilon", "delta"):
            if isinstance(d.get(k), str):
                d[k] = float(d[k])
        return cls(**d)


@dataclass(frozen=True)
class PrivacyClaim:
    """What a mechanism promises.

    Attributes:
        kind: see :class:`ClaimKind`.
        epsilon, delta: the DP parameters (``delta`` is ``0.0`` for pure DP / metric DP).
        unit: the neighbouring relation's unit (a record, a user, a word, ...).
        metric: for metric DP, the metric (``"euclidean"``, ``"mahalanobis"``).
        neighbouring: ``"add/remove"`` or ``"replace-one"``.
        accountant: the accountant used (``"prv"``, ``"rdp"``, ``"dp_accounting.rdp"`` ...).
        ledger: a JSON-serialisable ledger (dp_accounting event) where there is one.
        notes: free-text caveats that are part of the claim (e.g. "OOV words kept verbatim").
        extra: additional claimed quantities (e.g. ``epsilon_no_amplification``, per-level claims).
        noise_seeded: the privacy noise was drawn from a user-seeded generator (a reproducible
            simulation): the statement then says so (:data:`SEEDED_NOISE_NOTE`).
        adversaries: the guarantee against each adversary the threat model names
            (:class:`AdversaryBound`). When non-empty, ``epsilon`` is the largest of theirs (the
            strongest named adversary; filled in when ``None``, checked otherwise) and ``delta`` the
            delta of that bound when ``None``.

    Raises:
        InvalidPrivacyParameter: epsilon / delta out of range; a DP claim without ``unit``; a metric-DP
            claim without ``metric``; ``epsilon`` not the largest epsilon of ``adversaries``.
    """

    kind: ClaimKind
    epsilon: float | None = None
    delta: float | None = None
    unit: PrivacyUnit | None = None
    metric: str | None = None
    neighbouring: str | None = None
    accountant: str | None = None
    ledger: Mapping[str, Any] | None = None
    notes: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    noise_seeded: bool = False
    adversaries: tuple[AdversaryBound, ...] = ()

    def __post_init__(self) -> None:
        kind = ClaimKind(self.kind)
        object.__setattr__(self, "kind", kind)
        advs = tuple(
            a if isinstance(a, AdversaryBound) else AdversaryBound.from_dict(a)
            for a in self.adversaries
        )
        object.__setattr__(self, "adversaries", advs)
        if advs:
            strongest = self.strongest_adversary()
            if self.epsilon is None:
                object.__setattr__(self, "epsilon", strongest.epsilon)
            elif not _same_eps(float(self.epsilon), strongest.epsilon):
                raise InvalidPrivacyParameter(
                    f"epsilon must be the largest epsilon of the named adversaries "
                    f"({strongest.adversary}: {strongest.epsilon:.6g}); got {self.epsilon!r}"
                )
            if self.delta is None:
                object.__setattr__(self, "delta", strongest.delta)
        if self.unit is not None:
            object.__setattr__(self, "unit", PrivacyUnit(self.unit))
        object.__setattr__(self, "notes", tuple(self.notes))
        if kind in (ClaimKind.DP, ClaimKind.METRIC_DP):
            if self.epsilon is None or not (self.epsilon >= 0):
                raise InvalidPrivacyParameter(
                    f"epsilon must be in [0, inf] for a {kind.value} claim; got {self.epsilon!r}"
                )
            if self.unit is None:
                raise InvalidPrivacyParameter(f"unit is required for a {kind.value} claim")
            d = 0.0 if self.delta is None else self.delta
            if not (0.0 <= d < 1.0):
                raise InvalidPrivacyParameter(f"delta must be in [0, 1); got {self.delta!r}")
            object.__setattr__(self, "delta", float(d))
        if kind == ClaimKind.METRIC_DP and not self.metric:
            raise InvalidPrivacyParameter(
                "metric is required for a metric_dp claim (e.g. 'euclidean')"
            )

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def dp(cls, epsilon: float, delta: float, unit: str | PrivacyUnit, **kw: Any) -> PrivacyClaim:
        return cls(
            ClaimKind.DP, epsilon=float(epsilon), delta=float(delta), unit=PrivacyUnit(unit), **kw
        )

    @classmethod
    def metric_dp(
        cls, epsilon: float, metric: str, unit: str | PrivacyUnit = PrivacyUnit.WORD, **kw: Any
    ) -> PrivacyClaim:
        return cls(
            ClaimKind.METRIC_DP,
            epsilon=float(epsilon),
            delta=0.0,
            unit=PrivacyUnit(unit),
            metric=metric,
            **kw,
        )

    @classmethod
    def heuristic(cls, *notes: str, **kw: Any) -> PrivacyClaim:
        return cls(ClaimKind.HEURISTIC, notes=tuple(notes), **kw)

    @classmethod
    def cryptographic(cls, *notes: str, **kw: Any) -> PrivacyClaim:
        return cls(ClaimKind.CRYPTOGRAPHIC, notes=tuple(notes), **kw)

    @classmethod
    def none(cls, *notes: str) -> PrivacyClaim:
        return cls(ClaimKind.NONE, notes=tuple(notes) or ("no protection (baseline)",))

    def strongest_adversary(self) -> AdversaryBound | None:
        """The named adversary with the largest epsilon (the first of equals), or ``None``."""
        if not self.adversaries:
            return None
        return max(self.adversaries, key=lambda a: a.epsilon)

    def epsilon_against(self, adversary: str | Adversary) -> float | None:
        """The epsilon against ``adversary`` (its :class:`Adversary` value or phrase); ``None`` when
        the claim does not name it."""
        name = adversary.value if isinstance(adversary, Adversary) else str(adversary)
        for a in self.adversaries:
            if a.adversary == name:
                return a.epsilon
        return None

    # -- rendering ----------------------------------------------------------------------
    def headline(self) -> str:
        """One line a reader can quote: the guarantee against the strongest named adversary, the
        unit, and the group epsilon where the claim records one (``extra["group_epsilon"]`` with
        ``extra["group_size"]`` or ``extra["max_copies"]``)."""
        if self.kind != ClaimKind.DP:
            return self.statement().split(". ")[0]
        s = f"({_eps_text(self.epsilon)}, {self.delta:.3g})-DP per {self.unit.value}"
        strongest = self.strongest_adversary()
        if strongest is not None:
            if len(self.adversaries) > 1 and all(
                _same_eps(a.epsilon, strongest.epsilon) for a in self.adversaries
            ):
                # one guarantee for all: naming one "the strongest" would suggest the others get less
                s += " against every named adversary"
            else:
                s += f" against the {strongest.adversary}"
                if len(self.adversaries) > 1:
                    s += " (the strongest named adversary)"
        g = self.extra.get("group_epsilon")
        k = self.extra.get("group_size", self.extra.get("max_copies"))
        if isinstance(g, (int, float)) and isinstance(k, (int, float)) and k > 1:
            s += f"; a record repeated {int(k)} times: epsilon {_eps_text(float(g))}"
        return s

    def statement(self) -> str:
        """A human-readable, TF-Privacy-style privacy statement."""
        if self.kind == ClaimKind.DP:
            eps = (
                "inf"
                if self.epsilon is not None and math.isinf(self.epsilon)
                else f"{self.epsilon:.4g}"
            )
            s = f"({eps}, {self.delta:.3g})-DP at the {self.unit.value} level"
            if self.neighbouring:
                s += f" ({self.neighbouring} neighbours)"
            if self.accountant:
                s += f", accounted with {self.accountant}"
        elif self.kind == ClaimKind.METRIC_DP:
            s = f"{self.epsilon:.4g}·d_{self.metric}-privacy (metric DP) per {self.unit.value}"
        elif self.kind == ClaimKind.CRYPTOGRAPHIC:
            s = "cryptographic protection (secure computation)"
        elif self.kind == ClaimKind.HEURISTIC:
            s = "heuristic defense: no formal privacy guarantee"
        else:
            s = "no privacy protection"
        for k, v in self.extra.items():
            if isinstance(v, (int, float, str)):
                s += f"; {k}={v:.4g}" if isinstance(v, float) else f"; {k}={v}"
        if self.adversaries:
            s += ". Per adversary: " + "; ".join(a.describe() for a in self.adversaries)
        notes = self.notes + ((SEEDED_NOISE_NOTE,) if self.noise_seeded else ())
        if notes:
            s += ". " + " ".join(n if n.endswith(".") else n + "." for n in notes)
        return s

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind.value
        d["unit"] = self.unit.value if self.unit else None
        d["notes"] = list(self.notes)
        d["extra"] = dict(self.extra)
        d["adversaries"] = [a.to_dict() for a in self.adversaries]
        d["statement"] = self.statement()
        d["headline"] = self.headline()
        return _jsonable(d)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PrivacyClaim:
        d = dict(d)
        d.pop("statement", None)
        d.pop("headline", None)
        d["notes"] = tuple(d.get("notes", ()))
        d["extra"] = dict(d.get("extra") or {})
        d["adversaries"] = tuple(AdversaryBound.from_dict(a) for a in d.get("adversaries") or ())
        for k in ("epsilon", "delta"):
            if isinstance(d.get(k), str):
                d[k] = float(d[k])
        return cls(**d)


class Adversary(str, enum.Enum):
    """Who the adversary of a :class:`ThreatModel` is (the value is the wording shown on the cards)."""

    EAVESDROPPER = "eavesdropper"
    HONEST_BUT_CURIOUS_SERVER = "honest-but-curious server"
    MALICIOUS_CLIENT = "malicious client"
    BLACK_BOX_QUERIER = "black-box querier"
    WHITE_BOX_ANALYST = "white-box analyst"
    MPC_PARTY = "MPC party"
    DATA_RECIPIENT = "data recipient"
    #: sees the released models (final model / published snapshots) but NOT which users took part
    MODEL_OBSERVER = "observer of the released models"


@dataclass(frozen=True)
class ThreatModel:
    """Who the adversary is, what it sees, what it knows, and what it wants.

    Attributes:
        adversary: who the adversary is (an :class:`Adversary`, or its string value, converted on construction).
        observes: what it sees (e.g. ``"one client's gradient"``), converted to a tuple.
        knows: its side knowledge (labels, lengths, the model, ...).
        goal: what it wants to recover, in words.
        notes: free-form remarks shown on the cards.

    Raises:
        ValueError: ``adversary`` is not one of the :class:`Adversary` values.
    """

    adversary: Adversary
    observes: tuple[str, ...]
    knows: tuple[str, ...] = ()
    goal: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "adversary", Adversary(self.adversary))
        object.__setattr__(self, "observes", tuple(self.observes))
        object.__setattr__(self, "knows", tuple(self.knows))
        object.__setattr__(self, "notes", tuple(self.notes))

    def describe(self) -> str:
        s = f"{self.adversary.value}; observes: {', '.join(self.observes) or '-'}"
        if self.knows:
            s += f"; knows: {', '.join(self.knows)}"
        if self.goal:
            s += f"; goal: {self.goal}"
        return s

    def to_dict(self) -> dict[str, Any]:
        return {
            "adversary": self.adversary.value,
            "observes": list(self.observes),
            "knows": list(self.knows),
            "goal": self.goal,
            "notes": list(self.notes),
            "description": self.describe(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ThreatModel:
        d = dict(d)
        d.pop("description", None)
        return cls(**d)


def _same_eps(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _jsonable(x: Any) -> Any:
    """Convert numpy scalars / tuples / enums / inf to JSON-friendly values."""

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, (np.floating,)):
        x = float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    return x
