import subprocess
import sys


def test_import_is_light_and_fast():
    code = (
        "import time,sys; t=time.perf_counter(); import privnlp, privnlp.core, privnlp.mechanisms, privnlp.attacks; "
        "print(time.perf_counter()-t); print('torch' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert float(out[0]) < 2.0
    assert out[1] == "False", "import privnlp must not import torch"


def test_cli_help_and_version():
    out = subprocess.run(
        [sys.executable, "-m", "privnlp.cli.main", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0 and "privnlp 0.1.0" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "privnlp.cli.main", "--help"], capture_output=True, text=True
    )
    for g in ("train", "fl", "sanitize", "vocab", "fragment", "mpc", "attack", "evaluate", "data"):
        assert g in out.stdout


def test_entry_points_are_lazy_and_resolve():
    """Issue #30 item 5: one entry point per job re-exported from privnlp, loaded on first access, so
    `import privnlp` stays torch-free."""
    code = (
        "import sys, privnlp; assert 'torch' not in sys.modules; "
        "assert {'make_private', 'train_private', 'audit', 'sanitize_file', 'evaluate_defense'} <= set(dir(privnlp)); "
        "from privnlp.evaluation import audit; assert privnlp.audit is audit; "
        "from privnlp.mechanisms.training import make_private; assert privnlp.make_private is make_private; from privnlp.mechanisms.training.engine import DPEngine; assert privnlp.DPEngine is DPEngine; "
        "from privnlp.mechanisms.text.files import sanitize_file; assert privnlp.sanitize_file is sanitize_file; "
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_unknown_attribute_names_itself():
    import privnlp

    try:
        privnlp.no_such_thing  # noqa: B018
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:  # pragma: no cover
        raise AssertionError("privnlp.no_such_thing must raise AttributeError")


def test_light_commands_do_not_import_torch():
    """Issue #30 item 2: `privnlp --help`, `--version` and every group's `--help` stay torch-free (the
    commands import their heavy modules when they run), and so do `import privnlp.evaluation` and one
    scenario module that trains nothing (the scenario registry imports the torch ones on lookup)."""
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from privnlp.cli.main import GROUPS, app\n"
        "import privnlp.evaluation, privnlp.evaluation.scenarios, privnlp.evaluation.scenarios.vocab\n"
        "r = CliRunner()\n"
        "for args in (['--help'], ['--version'], ['redact', '--help'], *([g, '--help'] for g in GROUPS)):\n"
        "    res = r.invoke(app, args)\n"
        "    assert res.exit_code == 0, (args, res.output)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'opacus', 'flwr', 'crypten') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]", f"light commands imported {out.stdout.strip()}"


def test_scenario_registry_lists_every_scenario_module():
    """The scenario package imports none of its modules; the registry's list must name each one, or a
    new module's scenarios would be unknown."""
    import pkgutil

    import privnlp.evaluation.scenarios as pkg
    from privnlp.core.registry import SCENARIOS

    found = {f"{pkg.__name__}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)}
    assert set(SCENARIOS.modules) == found
