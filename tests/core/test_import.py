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
