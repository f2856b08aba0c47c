"""The chaos harness (``python -m bench.chaos``: SIGKILLs at any instant) and the soak."""
