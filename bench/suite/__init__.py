"""The suite: the benchmarks of ``python -m bench`` (the headline run), its report, publishing."""
