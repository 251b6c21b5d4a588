"""Leaky twins (see privnlp/mechanisms/testing.py). Filled in by the twins work."""
from __future__ import annotations
