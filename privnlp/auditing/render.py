"""Rendering of the DP audit on the mechanism cards and the HTML index, from the report only
(``report.config["dp_audit"]``, written by :func:`privnlp.auditing.runner.audit_report`)."""

from __future__ import annotations

import math
from typing import Any

from .result import DPAuditSuite

__all__ = ["suite_of", "audit_card_lines", "audit_index_text", "METHOD_LABELS"]

METHOD_LABELS = {
    "gdp_clopper_pearson": "Gaussian trade-off (GDP), Clopper-Pearson",
    "clopper_pearson": "Clopper-Pearson, assumption-free (Jagielski et al. 2020)",
    "fdp_gaussian_one_run": "one run, f-DP vs Gaussian curve (Mahloujifar et al. 2025)",
    "steinke_one_run": "one run (Steinke et al. 2023)",
    "metric_clopper_pearson": "Clopper-Pearson on output frequencies, per unit of the metric",
}


def suite_of(report: Any) -> DPAuditSuite | None:
    d = (getattr(report, "config", None) or {}).get("dp_audit")
    return DPAuditSuite.from_dict(d) if d else None


def _f(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def audit_card_lines(report: Any) -> list[str]:
    """The "Empirical DP audit" section of a card (empty when the report carries no audit)."""
    suite = suite_of(report)
    if suite is None:
        return []
    lines = [
        "## Empirical DP audit",
        "",
        f"Audited lower bounds on epsilon (`privnlp evaluate --audit-dp`, {suite.preset} preset, seed "
        f"{suite.seed}, {suite.seconds:.1f} s in all). Each row audits the implementation at the stated "
        "configuration, against the claim the mechanism itself states for that configuration. A lower bound "
        "is evidence of leakage, never a proof of privacy.",
        "",
        "| system | audit | claimed ε (δ) | audited ε ≥ | audited / claimed | method (confidence, trials) "
        "| other bound | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in suite.results:
        b = r.audited
        other = (
            "; ".join(
                f"{_f(o.epsilon)} ({METHOD_LABELS.get(o.method, o.method)})" for o in r.others
            )
            or "—"
        )
        mu = f", μ ≥ {b.mu:.3g}" if b.mu is not None else ""
        ratio = "—" if math.isnan(r.ratio) else f"{r.ratio:.2f}"
        lines.append(
            f"| {'defense' if r.system == 'defense' else 'leaky twin'} | {r.variant} | "
            f"{_f(r.claimed_epsilon)} ({r.claimed_delta:.2g}) | **{_f(b.epsilon)}**{mu} | {ratio} | "
            f"{METHOD_LABELS.get(b.method, b.method)} ({b.confidence:.0%}, {b.trials}) | {other} | "
            f"{r.seconds:.1f} s |"
        )
    lines.append("")
    for r in suite.results:
        if r.violated:
            lines.append(
                f"- **claim violated** ({'leaky twin' if r.system == 'leaky_twin' else 'defense'} "
                f"`{r.implementation.rsplit('.', 1)[-1]}`): audited ε ≥ {_f(r.audited.epsilon)} > claimed "
                f"ε = {_f(r.claimed_epsilon)} ({r.variant})."
            )
    ok = [r for r in suite.of("defense") if not r.violated]
    if ok and len(ok) == len(suite.of("defense")):
        lines.append(
            f"- defense: every audited bound is at or below its claim "
            f"(best audited/claimed {max((r.ratio for r in ok if not math.isnan(r.ratio)), default=math.nan):.2f})."
        )
    notes = sorted({n for r in suite.results for n in r.notes})
    lines += [f"- {n}" for n in notes] + [""]
    return lines


def audit_index_text(report: Any) -> str:
    """One short line for the HTML index ("" without an audit)."""
    suite = suite_of(report)
    if suite is None or suite.headline is None:
        return ""
    h = suite.headline
    s = f"audited ε ≥ {_f(h.audited.epsilon)} vs claimed {_f(h.claimed_epsilon)} ({h.audited.confidence:.0%})"
    bad = [r for r in suite.of("leaky_twin") if r.violated]
    if bad:
        s += f"; leaky twin: claim violated, audited ε ≥ {_f(max(r.audited.epsilon for r in bad))}"
    return s
