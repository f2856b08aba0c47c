"""voxcache's benchmark suite: voxcache against its peers and the machine's limits, in one run.

Run it with ``python -m bench [--quick] [--only NAME] [--out DIR]`` from a checkout (or
``voxcache bench``). Every figure is a median and a p99 over repeated measurements, and
every comparison is a ratio to a baseline measured in the same run: these machines are
shared and noisy, so absolute times drift while same-run ratios hold.
"""
