"""What a figure was measured on: the same code runs at different speeds on hosts of the
same size, so every report names the CPU and the load it shared the host with."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``AMD EPYC``, ``Intel(R) Xeon(R) …``), as /proc/cpuinfo says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as ``"1.20 0.80 0.41"``."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())
