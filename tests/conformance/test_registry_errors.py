"""Issue #30 item 4: a registry entry whose module failed to import raises that import error (naming the
module) when asked for; an unknown name still says "unknown" and lists the modules that failed."""

from __future__ import annotations

import sys

import pytest

from privnlp.core.errors import InvalidArgument, RegistryImportError
from privnlp.core.registry import Registry


@pytest.fixture
def broken_pkg(tmp_path, monkeypatch):
    """A package ``plant_reg`` whose submodule ``broken`` registers 'lamp_like' and imports a missing module,
    and a module ``plant_ok`` that registers 'ok'."""
    pkg = tmp_path / "plant_reg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from . import broken  # noqa\n")
    (pkg / "broken.py").write_text(
        "import no_such_module_xyz  # noqa\n"
        "from tests_registry_under_test import REG\n"
        "@REG.register('lamp_like')\nclass A: ...\n"
        '@REG.register("rlg_like")\nclass B: ...\n'
    )
    (tmp_path / "plant_ok.py").write_text(
        "from tests_registry_under_test import REG\n@REG.register('ok')\nclass C: ...\n"
    )
    reg = Registry("attack", ("plant_reg", "plant_ok"))
    holder = type(sys)("tests_registry_under_test")
    holder.REG = reg
    monkeypatch.setitem(sys.modules, "tests_registry_under_test", holder)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield reg
    for m in ("plant_reg", "plant_reg.broken", "plant_ok"):
        sys.modules.pop(m, None)


def test_entry_of_a_broken_module_raises_its_import_error(broken_pkg):
    reg = broken_pkg
    assert reg.get("ok").name == "ok"  # the healthy module's entries stay usable
    for name in ("lamp_like", "rlg_like"):
        with pytest.raises(RegistryImportError) as ei:
            reg.get(name)
        msg = str(ei.value)
        assert name in msg and "'plant_reg'" in msg and "no_such_module_xyz" in msg
        assert isinstance(ei.value.__cause__, ModuleNotFoundError)
        assert isinstance(ei.value, ImportError) and ei.value.module == "plant_reg"


def test_unknown_name_still_unknown_and_lists_failed_modules(broken_pkg):
    with pytest.raises(
        InvalidArgument, match=r"unknown attack 'typo'.*plant_reg.*no_such_module_xyz"
    ):
        broken_pkg.get("typo")
    assert broken_pkg.get("typo", default=1) == 1


def test_healthy_registry_unknown_name_message():
    reg = Registry("mechanism", ())
    with pytest.raises(InvalidArgument, match=r"unknown mechanism 'x'; known: \(none\)$"):
        reg.get("x")
