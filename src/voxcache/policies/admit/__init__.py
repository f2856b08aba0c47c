"""What may enter the cache: text rules, distinct callers and a quality gate
(``gate.Gate``); docs/operating/admission.md tells the whole story."""

from __future__ import annotations

from .gate import Gate, recent_refusals, refusal_counts
from .settings import (
    AdmissionSettings,
    GateSettings,
    QualitySettings,
    SavingsSettings,
    gate_settings,
)

__all__ = ["AdmissionSettings", "Gate", "GateSettings", "QualitySettings", "SavingsSettings",
           "gate_settings", "recent_refusals", "refusal_counts"]
