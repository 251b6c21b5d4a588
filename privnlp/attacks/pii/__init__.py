"""Attacks on redacted text: residual PII and re-identification (``pii_residual``)."""

from __future__ import annotations

from .residual import ResidualPII, reidentify, residual_recall

__all__ = ["ResidualPII", "reidentify", "residual_recall"]
