"""The one summary table that ends ``privnlp evaluate`` (issue #21): every defense, its claim, and each paired
attack's headline metric undefended / defended / leaky twin, plus the failures."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

__all__ = ["summary_table", "short_claim"]


def _num(v: Any) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def short_claim(claim: Any, *, long: bool = False) -> str:
    """One line for a :class:`~privnlp.core.claims.PrivacyClaim` (the card states it in full).

    Args:
        claim: the claim.
        long: the README / site wording (``(7.96, 1e-05)-DP per example``, ``heuristic (no formal guarantee)``)
            instead of the terminal's (``(7.96, 1e-05)-DP / example``, ``heuristic``).

    Returns:
        ``(eps, delta)-DP``, ``eps·d metric DP``, ``cryptographic``, ``heuristic`` or ``none``.
    """
    kind = getattr(claim.kind, "value", str(claim.kind))
    unit = getattr(claim.unit, "value", claim.unit)
    per = "per" if long else "/"
    eps = claim.epsilon
    e = "∞" if eps is not None and math.isinf(eps) else (f"{eps:.3g}" if eps is not None else "?")
    if kind == "dp":
        # the README / site line: the strongest named adversary and the group epsilon (issue #28)
        return claim.headline() if long else f"({e}, {claim.delta:.0e})-DP {per} {unit}"
    if kind == "metric_dp":
        return f"{e}·d metric DP {per} {unit}"
    heuristic = "heuristic (no formal guarantee)" if long else "heuristic"
    return {"cryptographic": "cryptographic", "heuristic": heuristic}.get(kind, "none")


def summary_table(
    outcomes: Sequence[Any], failures: Mapping[str, str] | None = None, *, audit_text: Any = None
) -> Any:
    """A :class:`rich.table.Table`: one row per (defense, paired attack), one section per defense.

    Args:
        outcomes: :class:`privnlp.evaluation.cards.EvaluationOutcome` objects (``name``, ``report``,
            ``seconds``).
        failures: defense name -> error message; shown as red rows.
        audit_text: optional ``report -> str`` (the DP-audit summary), shown under the claim.

    Returns:
        The table; print it with a :class:`rich.console.Console`. The headline metrics are oriented so that
        higher = more leakage; the full claim and confidence intervals are in each report.
    """

    table = Table(
        title="privnlp evaluate: headline leakage (higher = more leakage)", title_justify="left"
    )
    table.add_column("defense / claim / time", overflow="fold", min_width=12)
    table.add_column("attack", overflow="fold")
    table.add_column("metric", overflow="fold")
    for col, style in (("undef.", None), ("defended", "green"), ("twin", None)):
        table.add_column(col, justify="right", style=style, no_wrap=True)
    for o in outcomes:
        claim = short_claim(o.report.claim)
        if audit_text is not None and audit_text(o.report):
            claim += f"; {audit_text(o.report)}"
        head = f"[bold]{o.name}[/bold]\n[dim]{claim}\n{o.seconds:.0f} s[/dim]"
        heads = list(o.report.headline().items()) or [("—", {"metric": "no attack measured"})]
        for i, (atk, v) in enumerate(heads):
            table.add_row(
                head if i == 0 else "",
                atk.split(" (")[0],
                v.get("metric", ""),
                _num(v.get("undefended")),
                _num(v.get("defended")),
                _num(v.get("leaky_twin")),
                end_section=i == len(heads) - 1,
            )
    for name, err in (failures or {}).items():
        table.add_row(
            f"[bold red]{name}[/bold red]\n[red]FAILED[/red]",
            f"[red]{err}[/red]",
            "",
            "",
            "",
            "",
            end_section=True,
        )
    return table
