"""MPC party-view audit (``party_view``), paired with ``crypten_textcnn``."""

from __future__ import annotations

from .party_view import PartyViewAudit, uniformity_stats

__all__ = ["PartyViewAudit", "uniformity_stats"]
