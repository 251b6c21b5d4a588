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
