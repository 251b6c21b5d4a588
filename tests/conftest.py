"""Suite-wide settings: offline, deterministic, lean on 2 cores."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("MPLBACKEND", "Agg")

# One model/embedding cache for the whole session (and across local runs); a clean clone starts
# empty, so CI builds each bundled artifact exactly once.
from pathlib import Path as _Path

os.environ.setdefault(
    "PRIVNLP_CACHE_DIR", str(_Path(__file__).resolve().parents[1] / ".privnlp-cache" / "tests")
)


import shutil as _shutil

import pytest as _pytest


@_pytest.fixture
def chromium() -> str:
    """The headless browser for the render tests; skips with a message where none is installed (``.ci/run``
    installs Debian's ``chromium``)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = _shutil.which(name)
        if found:
            return found
    _pytest.skip(
        "Chromium is not installed (the CI script installs Debian's `chromium`); cannot render HTML"
    )
