"""Parameter sweeps: privacy-utility curves (leakage metric vs utility metric, one line per
mechanism configuration family), the plots a user reads to pick a setting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from privnlp.core.errors import InvalidArgument
from privnlp.core.report import Figure
from privnlp.evaluation.plots import tradeoff_figure

from .audit import audit, resolve_mechanism

__all__ = ["SweepCurve", "SweepResult", "sweep", "with_params"]


def with_params(mechanism: Any, **changes: Any) -> Any:
    """A copy of ``mechanism`` with some constructor arguments changed (constructors store
    every argument as an attribute of the same name, so this is exact).

    Args:
        mechanism: the mechanism to copy.
        **changes: constructor arguments to change.

    Returns:
        A new instance of the same class.

    Raises:
        InvalidArgument: a name in ``changes`` is not a constructor argument (or the constructor rejects a value).
    """
    params = {k: v for k, v in vars(mechanism).items() if not k.startswith("_")}
    unknown = set(changes) - set(params)
    if unknown:
        raise InvalidArgument(
            f"cannot sweep {sorted(unknown)}: not constructor arguments of "
            f"{type(mechanism).__name__} (known: {sorted(params)})"
        )
    params.update(changes)
    return type(mechanism)(**params)


@dataclass(frozen=True)
class SweepCurve:
    """One family's points of a sweep.

    Attributes:
        label: the family's label in the plot.
        param: the swept constructor argument.
        points: per value, ``{"param": value, <leakage metric>: mean, <utility metric>: mean}``.
    """

    label: str
    param: str
    points: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class SweepResult:
    """Privacy-utility curves of a sweep.

    Attributes:
        curves: one curve per family.
        leakage: the leakage metric (y axis).
        utility: the utility metric (x axis).
        figure: the rendered trade-off plot.
        extra: free-form details.
    """

    curves: tuple[SweepCurve, ...]
    leakage: str
    utility: str
    figure: Figure | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "leakage": self.leakage,
            "utility": self.utility,
            "curves": [
                {"label": c.label, "param": c.param, "points": [dict(p) for p in c.points]}
                for c in self.curves
            ],
        }


def sweep(
    families: Mapping[str, tuple[Any, str, Sequence[Any]]],
    *,
    attack: str,
    leakage: str | None = None,
    utility: str,
    seeds: Sequence[int] = (0,),
    preset: str = "quick",
    scenario: Any = None,
    cache_dir: Any = None,
    progress: bool = False,
    title: str = "",
) -> SweepResult:
    """Sweep one parameter per family and collect (utility, leakage) points.

    Args:
        families: label -> (mechanism (instance / name), parameter name, values).
        attack: the attack whose metric is the leakage axis.
        leakage: that attack's metric (default: its headline metric).
        utility: a utility metric produced by the scenario.
    """

    curves = []
    for label, (mech, param, values) in families.items():
        base = resolve_mechanism(mech, preset)
        pts = []
        for v in values:
            m = with_params(base, **{param: v})
            rep = audit(
                m,
                scenario,
                [attack],
                seeds=seeds,
                preset=preset,
                baseline=False,
                cache_dir=cache_dir,
                progress=progress,
                figures=False,
            )
            if not rep.attacks:
                continue
            a = rep.attacks[0]
            metric = leakage or a.headline_metric
            pts.append(
                {
                    "param": v,
                    metric: a.defended[metric].mean,
                    utility: rep.utility[utility].mean if utility in rep.utility else float("nan"),
                }
            )
        curves.append(SweepCurve(label, param, tuple(pts)))
    lk = (
        leakage
        or (
            curves
            and curves[0].points
            and next(k for k in curves[0].points[0] if k not in ("param", utility))
        )
        or "leakage"
    )
    fig = tradeoff_figure(
        curves,
        x=utility,
        y=lk,
        title=title or f"{lk} vs {utility}",
        name="sweep",
        caption=f"Privacy-utility trade-off: {lk} (leakage) against {utility}; labels = parameter values.",
    )
    return SweepResult(tuple(curves), lk, utility, fig)
