"""Probes: standalone measurements, each behind one doc page (``python -m bench.probes.NAME``)."""
