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

os.environ.setdefault("PRIVNLP_CACHE_DIR", str(_Path(__file__).resolve().parents[1] / ".privnlp-cache" / "tests"))
