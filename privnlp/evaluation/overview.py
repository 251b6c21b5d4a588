"""The index page's overview (issue #17): a defenses x attacks heatmap of the headline leakage
(undefended -> defended) and one privacy-utility scatter of all defenses; each also written as PNG
and SVG next to ``index.html``.

Headline metrics have different scales (ROUGE in [0, 1], canary exposure in bits), so the heatmap's
colour is the *fraction of the undefended leakage that remains* under the defense (defended /
undefended, clipped to [0, 1.5]); each cell prints the raw ``undefended -> defended`` numbers. The
scatter puts each defense at (leakage remaining, averaged over its attacks; relative utility change,
averaged over its utility metrics: ``|defended - undefended| / |undefended|``).
"""

from __future__ import annotations

import base64
import html as _html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["overview_matrix", "overview_figures", "overview_html"]


def _ratio(u: float, d: float) -> float:
    if math.isnan(u) or math.isnan(d):
        return math.nan
    if abs(u) < 1e-12:
        return 0.0 if abs(d) < 1e-12 else 1.5
    return max(0.0, min(1.5, d / u))


def overview_matrix(
    reports: Sequence[Any],
) -> tuple[list[str], list[str], dict[tuple[str, str], tuple[float, float]]]:
    """``(defenses, attacks, {(defense, attack): (undefended, defended)})`` from the reports' headlines."""
    defenses, attacks, cells = [], [], {}
    for r in reports:
        defenses.append(r.mechanism)
        for a, v in r.headline().items():
            a = a.split(" (")[0]  # "film (fedsgd.eavesdropper)" -> the attack's column
            if (r.mechanism, a) in cells:
                continue
            if a not in attacks:
                attacks.append(a)
            cells[(r.mechanism, a)] = (
                float(v.get("undefended", math.nan)),
                float(v.get("defended", math.nan)),
            )
    return defenses, attacks, cells


def _utility_change(r: Any) -> float:
    vals = []
    for k, d in r.utility.items():
        u = r.utility_undefended.get(k)
        if u is None or math.isnan(u.mean) or math.isnan(d.mean) or abs(u.mean) < 1e-12:
            continue
        vals.append(abs(d.mean - u.mean) / abs(u.mean))
    return float(sum(vals) / len(vals)) if vals else math.nan


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, imported on first use: matplotlib is heavy and this module
    is imported by the cards renderer, which the CLI's ``attack`` commands load at their top."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any) -> tuple[bytes, bytes]:
    plt = _pyplot()
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=110, bbox_inches="tight")
    fig.savefig(svg, format="svg", bbox_inches="tight")
    plt.close(fig)
    return png.getvalue(), svg.getvalue()


def overview_figures(reports: Sequence[Any]) -> dict[str, tuple[bytes, bytes]]:
    """``{"overview-heatmap": (png, svg), "overview-tradeoff": (png, svg)}`` (empty when nothing was measured)."""
    plt = _pyplot()
    defenses, attacks, cells = overview_matrix(reports)
    if not attacks:
        return {}
    out = {}
    mat = np.full((len(defenses), len(attacks)), np.nan)
    for (dname, a), (u, d) in cells.items():
        mat[defenses.index(dname), attacks.index(a)] = _ratio(u, d)
    fig, ax = plt.subplots(figsize=(1.25 * len(attacks) + 3.2, 0.42 * len(defenses) + 1.8))
    cmap = plt.get_cmap("RdYlGn_r").with_extremes(bad="#eeeeee")
    im = ax.imshow(np.ma.masked_invalid(mat), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for (dname, a), (u, d) in cells.items():
        ax.text(
            attacks.index(a),
            defenses.index(dname),
            f"{u:.2f}→{d:.2f}",
            ha="center",
            va="center",
            fontsize=7,
        )
    ax.set_xticks(range(len(attacks)))
    ax.set_xticklabels(attacks, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(defenses)))
    ax.set_yticklabels(defenses, fontsize=8)
    fig.colorbar(im, ax=ax, label="leakage remaining (defended / undefended)")
    ax.set_title("Headline leakage per defense and attack: undefended → defended")
    out["overview-heatmap"] = _save(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for r in reports:
        ratios = [_ratio(u, d) for (dn, _), (u, d) in cells.items() if dn == r.mechanism]
        ratios = [x for x in ratios if not math.isnan(x)]
        x, y = (float(np.mean(ratios)) if ratios else math.nan), _utility_change(r)
        if math.isnan(x) or math.isnan(y):
            continue
        ax.scatter([x], [y], s=36)
        ax.annotate(r.mechanism, (x, y), fontsize=7, textcoords="offset points", xytext=(4, 3))
    ax.set_xlabel("leakage remaining (defended / undefended, mean over attacks)")
    ax.set_ylabel("relative utility change (mean |Δ| / |undefended|, symlog)")
    ax.set_title("Privacy–utility of all defenses (lower-left is better)")
    ax.set_yscale(
        "symlog", linthresh=0.1
    )  # a few defenses change a near-zero utility metric many-fold
    ax.grid(alpha=0.3)
    out["overview-tradeoff"] = _save(fig)
    return out


def overview_html(reports: Sequence[Any], report_dir: str | Path) -> str:
    """Write the overview PNG + SVG files into ``report_dir`` and return the HTML block (PNG inlined)."""
    figs = overview_figures(reports)
    parts = []
    captions = {
        "overview-heatmap": "Defenses × attacks: headline leakage, undefended → defended; colour = fraction "
        "of the undefended leakage that remains.",
        "overview-tradeoff": "Privacy–utility: each defense's leakage remaining vs its relative utility change.",
    }
    for name, (png, svg) in figs.items():
        (Path(report_dir) / f"{name}.png").write_bytes(png)
        (Path(report_dir) / f"{name}.svg").write_bytes(svg)
        parts.append(
            f"<figure><img alt='{name}' src='data:image/png;base64,{base64.b64encode(png).decode()}' "
            f"style='max-width:100%'><figcaption>{_html.escape(captions[name])} "
            f"(<a href='{name}.png'>PNG</a>, <a href='{name}.svg'>SVG</a>)</figcaption></figure>"
        )
    return "".join(parts)
