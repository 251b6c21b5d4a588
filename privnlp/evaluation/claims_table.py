"""The claims table: every DP mechanism's guarantee against each adversary, generated from the code.

For each DP mechanism of the registry (and client-level DP-SGD in federated learning) at a reference
setting: the privacy unit, the neighbouring relation, each adversary its threat model names and what it
observes, the accountant, and the epsilon the code claims. Where a claim lists its adversaries
(:attr:`privnlp.core.claims.PrivacyClaim.adversaries`, e.g. DP-FedAvg) they are used as they are;
otherwise every adversary of the class's threat models gets the claim's one epsilon (its output is all
they see). ``tests/accounting/test_claims_table.py`` recomputes every (epsilon, delta) DP row with
``dp_accounting`` directly and checks that ``docs/claims.md`` is up to date.

Regenerate: ``.venv/bin/python -m privnlp.evaluation.claims_table --write docs/claims.md``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privnlp.accounting import REPORTED, DPLedger
from privnlp.core.claims import ClaimKind, PrivacyClaim
from privnlp.core.registry import MECHANISMS
from privnlp.mechanisms.federated.mechanisms import DPFedAvg, client_dp_adversary_bounds

__all__ = ["ClaimRow", "REFERENCE_SETTINGS", "claims_table_rows", "render_markdown", "main"]


@dataclass(frozen=True)
class ClaimRow:
    """One row: a mechanism at a reference setting, against one adversary.

    Attributes:
        mechanism: the registry name (or ``"fedavg + client DP-SGD"``).
        setting: the reference setting in words.
        kind: ``"dp"`` or ``"metric_dp"``.
        unit, neighbouring: the claim's privacy unit and neighbouring relation.
        adversary, observes: who and what it sees.
        epsilon, delta: the guarantee against that adversary.
        accountant: how epsilon was computed.
        amplified: epsilon uses amplification by sampling.
        params: the reference parameters (the test recomputes epsilon from them).
    """

    mechanism: str
    setting: str
    kind: str
    unit: str
    neighbouring: str
    adversary: str
    observes: str
    epsilon: float
    delta: float
    accountant: str
    amplified: bool
    params: Mapping[str, Any] = field(default_factory=dict)


def _dp_sgd(p: Mapping[str, Any]) -> PrivacyClaim:
    led = DPLedger()
    led.record(p["noise_multiplier"], p["sample_rate"], p["steps"])
    # the bounds the DP-SGD claim itself states (PrivateTraining.adversary_bounds: the white-box analyst and
    # the black-box querier); Poisson sampling is internal, no named adversary sees it (amplified for all)
    bounds = led.adversary_bounds(p["delta"], accountant="prv")
    return PrivacyClaim.dp(
        max(b.epsilon for b in bounds),
        p["delta"],
        "example",
        neighbouring="zero-out (dataset size N public; q and the normaliser from public values)",
        accountant=REPORTED["prv"],
        adversaries=bounds,
    )


def _dp_fedavg(p: Mapping[str, Any]) -> PrivacyClaim:
    return DPFedAvg(
        noise_multiplier=p["noise_multiplier"],
        rounds=p["rounds"],
        num_users=p["population"],
        clients_per_round=p["clients_per_round"],
        sampling=p["sampling"],
        delta=p["delta"],
    ).claim()


def _dp_fedavg_secagg(p: Mapping[str, Any]) -> PrivacyClaim:
    """The Flower deployment's SecAgg+ mode (distributed Skellam noise) at the same rounds / clients / z."""
    mech = DPFedAvg(
        noise_multiplier=p["noise_multiplier"],
        rounds=p["rounds"],
        num_users=p["population"],
        clients_per_round=p["clients_per_round"],
        sampling="fixed",
        delta=p["delta"],
        clip_norm=p["clip_norm"],
    )
    (bounds,) = [
        v
        for k, v in mech.deployment_claims(dim=p["dim"], levels=p["levels"]).items()
        if "SecAgg+" in k
    ]
    return PrivacyClaim.dp(
        max(b.epsilon for b in bounds),
        max(b.delta for b in bounds),
        "user",
        neighbouring="zero-out (population N public)",
        accountant=bounds[0].accountant,
        adversaries=bounds,
    )


def _client_dp_sgd(p: Mapping[str, Any]) -> PrivacyClaim:
    led = DPLedger()
    led.record(p["noise_multiplier"], p["sample_rate"], p["steps_per_round"] * p["rounds"])
    eps = led.epsilon(p["delta"], "rdp").epsilon
    return PrivacyClaim.dp(
        eps,
        p["delta"],
        "record",
        neighbouring="add/remove (each client's data set size public)",
        accountant="dp_accounting RDP",
        adversaries=client_dp_adversary_bounds(eps, p["delta"]),
    )


def _registry_example(name: str) -> Callable[[Mapping[str, Any]], PrivacyClaim]:
    def build(p: Mapping[str, Any]) -> PrivacyClaim:
        return MECHANISMS.get(name).example("quick").claim()

    return build


#: (mechanism, registry name for the threat models or None, setting in words, parameters, builder)
REFERENCE_SETTINGS: tuple[tuple[str, str | None, str, dict[str, Any], Callable], ...] = (
    (
        "dp_sgd",
        "dp_sgd",
        "sigma 1.1, q 0.01, 1000 steps",
        {"noise_multiplier": 1.1, "sample_rate": 0.01, "steps": 1000, "delta": 1e-5},
        _dp_sgd,
    ),
    (
        "dp_fedavg",
        None,
        "N 1000, 50 per round (Poisson), z 1, 100 rounds",
        {
            "noise_multiplier": 1.0,
            "clients_per_round": 50,
            "population": 1000,
            "rounds": 100,
            "sampling": "poisson",
            "delta": 1e-5,
        },
        _dp_fedavg,
    ),
    (
        "dp_fedavg",
        None,
        "N 1000, 100 per round (fixed), z 1, 100 rounds",
        {
            "noise_multiplier": 1.0,
            "clients_per_round": 100,
            "population": 1000,
            "rounds": 100,
            "sampling": "fixed",
            "delta": 1e-5,
        },
        _dp_fedavg,
    ),
    (
        "dp_fedavg (SecAgg+, distributed Skellam noise)",
        None,
        "N 1000, 100 per round (fixed), z 1, 100 rounds; d 10,000 coordinates, 1024 levels, 32 bits",
        {
            "noise_multiplier": 1.0,
            "clients_per_round": 100,
            "population": 1000,
            "rounds": 100,
            "delta": 1e-5,
            "clip_norm": 1.0,
            "dim": 10_000,
            "levels": 1024,
        },
        _dp_fedavg_secagg,
    ),
    (
        "fedavg + client DP-SGD",
        None,
        "client sigma 1, q 0.1, 10 local steps per round, in all 20 rounds",
        {
            "noise_multiplier": 1.0,
            "sample_rate": 0.1,
            "steps_per_round": 10,
            "rounds": 20,
            "delta": 1e-5,
        },
        _client_dp_sgd,
    ),
    (
        "dp_wordpiece",
        "dp_wordpiece",
        "quick example (k 8 words per document, Laplace)",
        {},
        _registry_example("dp_wordpiece"),
    ),
    ("laplace_metric", "laplace_metric", "quick example", {}, _registry_example("laplace_metric")),
    ("mahalanobis", "mahalanobis", "quick example", {}, _registry_example("mahalanobis")),
    ("vickrey", "vickrey", "quick example", {}, _registry_example("vickrey")),
    ("vickrey_k", "vickrey_k", "quick example", {}, _registry_example("vickrey_k")),
)


def _threat_adversaries(registry_name: str | None) -> list[tuple[str, str]]:
    if registry_name is None:
        return []

    cls = MECHANISMS.get(registry_name)
    return [(t.adversary.value, ", ".join(t.observes)) for t in cls.threat_models]


def claims_table_rows() -> list[ClaimRow]:
    """Every row of the table (builds each reference claim with the code that states it)."""
    rows = []
    for mech, reg, setting, params, build in REFERENCE_SETTINGS:
        c = build(params)
        if c.kind not in (ClaimKind.DP, ClaimKind.METRIC_DP):
            continue
        unit = c.unit.value + (f" ({c.metric} metric)" if c.metric else "")
        nb = c.neighbouring or ("metric (epsilon x distance)" if c.metric else "-")
        base = dict(mechanism=mech, setting=setting, kind=c.kind.value, unit=unit, neighbouring=nb)
        if c.adversaries:
            for a in c.adversaries:
                rows.append(
                    ClaimRow(
                        **base,
                        adversary=a.adversary,
                        observes=a.observes,
                        epsilon=a.epsilon,
                        delta=a.delta,
                        accountant=a.accountant,
                        amplified=a.amplified,
                        params=dict(params),
                    )
                )
            continue
        acct = c.accountant or ("the mechanism's parameter (metric DP)" if c.metric else "-")
        amplified = False  # a claim that uses amplification names its adversaries (AdversaryBound)
        for adv, obs in _threat_adversaries(reg) or [("any", "the output")]:
            rows.append(
                ClaimRow(
                    **base,
                    adversary=adv,
                    observes=obs,
                    epsilon=float(c.epsilon),
                    delta=float(c.delta or 0.0),
                    accountant=acct,
                    amplified=amplified,
                    params=dict(params),
                )
            )
    return rows


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"


def render_markdown(rows: list[ClaimRow]) -> str:
    """The docs page (``docs/claims.md``)."""
    out = [
        "# Privacy claims per adversary",
        "",
        "<!-- generated by privnlp/evaluation/claims_table.py: do not edit; regenerate with",
        "     .venv/bin/python -m privnlp.evaluation.claims_table --write docs/claims.md -->",
        "",
        "Every DP mechanism's guarantee at a reference setting, against each adversary its threat "
        "model names, as the code states it. The headline epsilon of a claim is the largest in its "
        "rows (the strongest named adversary). *Amplified* means the epsilon uses privacy "
        "amplification by sampling, which is sound only against an adversary who does not see the "
        "sample: the DP-FedAvg server and an eavesdropper see which users took part, so their "
        "epsilon is the Gaussian composition over the rounds a user took part in (a binomial tail "
        "bound on participations, charged to delta, or every round if tighter). "
        "`tests/accounting/test_claims_table.py` recomputes every (epsilon, delta)-DP row with "
        "dp_accounting directly. Metric-DP rows state the mechanism's epsilon parameter (per unit "
        "of distance), which no accountant changes.",
        "",
        "| mechanism | reference setting | unit | neighbours | adversary | observes | epsilon "
        "| delta | amplified | accountant |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.mechanism} | {r.setting} | {r.unit} | {r.neighbouring} | {r.adversary} | "
            f"{r.observes} | {_fmt(r.epsilon)} | {r.delta:.3g} | {'yes' if r.amplified else 'no'} "
            f"| {r.accountant} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m privnlp.evaluation.claims_table", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--write", metavar="PATH", help="write the Markdown page here (else stdout)")
    a = ap.parse_args(argv)
    text = render_markdown(claims_table_rows())
    if a.write:
        Path(a.write).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
