"""The layers the docs describe hold in the code: imports point down, never up (issue #21).

    core  <-  accounting / data / models / metrics  <-  mechanisms / attacks  <-  auditing  <-  evaluation  <-  cli

Every ``import`` / ``from ... import`` anywhere in a module counts, including the ones inside
function bodies (a lazy import is still a dependency) and relative imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "privnlp"

#: rank of each top-level subpackage; a module may import only subpackages of rank <= its own
LAYER = {
    "core": 0,
    "accounting": 1,
    "data": 1,
    "models": 1,
    "metrics": 1,
    "mechanisms": 2,
    "attacks": 2,
    "auditing": 3,
    "evaluation": 4,
    "cli": 5,
}


def _module_name(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def privnlp_imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, dotted module) of every privnlp import in ``path``, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = (
        _module_name(path, root) if path.name == "__init__.py" else _module_name(path, root)[:-1]
    )
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
                # `from . import x` imports submodule x
                out += [
                    (node.lineno, f"{mod}.{a.name}" if not node.module else mod) for a in node.names
                ]
            elif node.module:
                out.append((node.lineno, node.module))
    return [(ln, m) for ln, m in out if m == "privnlp" or m.startswith("privnlp.")]


def _top(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else None


def violations(root: Path = ROOT) -> list[str]:
    bad = []
    for path in sorted((root / "privnlp").rglob("*.py")):
        rel = path.relative_to(root / "privnlp").parts
        if len(rel) < 2:  # privnlp/__init__.py: lazy loader of every subpackage by name only
            continue
        here = rel[0]
        if here not in LAYER:
            bad.append(
                f"{path.relative_to(root)}: subpackage {here!r} has no layer in tests/docs/test_layering.py"
            )
            continue
        for line, mod in privnlp_imports(path, root):
            there = _top(mod)
            if there is None or there == here:
                continue
            if there not in LAYER:
                bad.append(f"{path.relative_to(root)}:{line} imports {mod} (unknown layer)")
            elif LAYER[there] > LAYER[here]:
                bad.append(
                    f"{path.relative_to(root)}:{line} imports {mod}: {here} (layer {LAYER[here]}) must not "
                    f"import {there} (layer {LAYER[there]})"
                )
    return bad


def test_imports_point_down_the_layers():
    bad = violations()
    assert not bad, "imports pointing up the layers:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "src,ok",
    [
        ("from privnlp.evaluation.scenarios.federated import X\n", False),
        ("def f():\n    from privnlp.cli.main import app\n", False),
        ("from privnlp.core.errors import InvalidArgument\n", True),
        (
            "from ...evaluation import audit\n",
            False,
        ),  # relative import from privnlp/mechanisms/federated/x.py
        ("from ..training import DPSGD\n", True),
    ],
)
def test_the_checker_catches_upward_imports(tmp_path, src, ok):
    """The checker itself can fail: an upward import planted in a mechanism module is reported."""
    mod = tmp_path / "privnlp" / "mechanisms" / "federated" / "planted.py"
    mod.parent.mkdir(parents=True)
    mod.write_text(src)
    assert (not violations(tmp_path)) == ok, violations(tmp_path)


def test_the_secret_sharer_grid_lives_in_the_evaluation_layer():
    assert not (PKG / "mechanisms" / "federated" / "secret_sharer.py").exists()
    from privnlp.evaluation import secret_sharer_grid

    assert secret_sharer_grid.__module__ == "privnlp.evaluation.secret_sharer"


def _subpackages() -> list[Path]:
    return sorted(p for p in PKG.rglob("__init__.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize(
    "init", _subpackages(), ids=lambda p: ".".join(p.relative_to(ROOT).parent.parts)
)
def test_every_package_lists_its_public_api_explicitly(init):
    """``__all__`` is a literal list of names (the API reference documents exactly these), each one resolves."""
    import importlib

    tree = ast.parse(init.read_text())
    values = [
        n.value
        for n in tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        and any(
            isinstance(t, ast.Name) and t.id == "__all__"
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        )
    ]
    assert values, f"{init.relative_to(ROOT)} has no __all__"
    names = ast.literal_eval(values[-1])  # raises ValueError when __all__ is computed
    assert isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)
    assert len(set(names)) == len(names), "duplicate names in __all__"
    mod = importlib.import_module(".".join(init.relative_to(ROOT).parent.parts))
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"names in __all__ that do not resolve: {missing}"


def test_models_exports_every_lazy_name():
    import privnlp.models as m

    assert set(m.__all__) == set(m._EXPORTS)
