"""Plots for reports: headline leakage bars and privacy-utility curves (matplotlib, Agg)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from privnlp.core.report import Figure, LeakageReport, figure_from_matplotlib


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def headline_bar_figure(report: LeakageReport) -> Figure:
    """Bars of each attack's headline metric: undefended vs defended (vs leaky twin)."""
    plt = _plt()
    attacks = list(report.attacks)
    labels = [f"{report._attack_label(a)}\n({a.headline_metric})" for a in attacks]
    series = [("undefended", "#d9534f"), ("defended", "#2e7d32"), ("leaky_twin", "#f0ad4e")]
    fig, ax = plt.subplots(figsize=(max(4.5, 1.9 * len(attacks) + 1.5), 3.4))
    width = 0.26
    for i, (key, color) in enumerate(series):
        means, errs, xs = [], [], []
        for j, a in enumerate(attacks):
            src = {"undefended": a.undefended, "defended": a.defended, "leaky_twin": a.leaky_twin}[
                key
            ]
            m = src.get(a.headline_metric)
            if m is None or math.isnan(m.mean):
                continue
            xs.append(j + (i - 1) * width)
            means.append(m.mean)
            errs.append(0.0 if math.isnan(m.ci_high) else (m.ci_high - m.ci_low) / 2)
        if xs:
            ax.bar(xs, means, width, yerr=errs, color=color, label=key.replace("_", " "), capsize=3)
    ax.set_xticks(range(len(attacks)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("headline metric (higher = more leakage)")
    ax.set_title(f"{report.mechanism}: measured leakage")
    ax.legend(fontsize=8)
    return figure_from_matplotlib(
        fig, "leakage", "Headline leakage metric per attack, 95% CI over seeds."
    )


def tradeoff_figure(
    curves: Sequence[Any],
    *,
    x: str,
    y: str,
    title: str = "",
    name: str = "tradeoff",
    caption: str = "",
) -> Figure:
    """One line per curve; each curve has ``label`` and ``points`` (dicts with x, y and ``param``)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    for c in curves:
        pts = [
            p
            for p in c.points
            if not (math.isnan(p.get(x, math.nan)) or math.isnan(p.get(y, math.nan)))
        ]
        if not pts:
            continue
        ax.plot([p[x] for p in pts], [p[y] for p in pts], marker="o", label=c.label)
        for p in pts:
            ax.annotate(
                f"{p['param']:g}" if isinstance(p["param"], (int, float)) else str(p["param"]),
                (p[x], p[y]),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, 3),
            )
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure_from_matplotlib(fig, name, caption or f"{y} vs {x}")
