#!/usr/bin/env bash
# Install everything (system packages, venv, every extra at the versions in constraints.txt)
# and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VOXCACHE_EXTRAS=all,test bash scripts/setup.sh sox:sox ffmpeg:ffmpeg chromium:chromium nginx:nginx wrk:wrk prometheus:prometheus promtool:prometheus redis-server:redis-server redis-cli:redis-tools espeak-ng:espeak-ng
# a third-party engine, its own distribution, loaded only through its entry point; installed
# as a wheel, not editable: an editable install's import hook ran in every Python process
# the suite starts (~1,600), ~10 ms each
.venv/bin/python -m pip install -q --no-deps --force-reinstall tests/plugins/voxcache-styletone
# The suite starts hundreds of `voxcache` processes (serve nodes, CLI runs); where
# PYTHONDONTWRITEBYTECODE is set (it is on the hosts the suite was timed on) no run writes the
# compiled modules, so each process compiled the package anew (packs/test_pack_rollback.py:
# 20.1 s of CPU, 15.4 s with them). Compiling once here (~0.5 s) lets them all read them.
.venv/bin/python -m compileall -q src tests bench
# pytest rewrites the asserts of each test module it imports and, with PYTHONDONTWRITEBYTECODE
# set, keeps none of it: each worker rewrote every module again (collection 10.1 CPU-s a
# worker; 5.4 with the rewritten modules kept). One collection writes them, on the core that
# the checks below (mypy is one process) leave idle.
env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -m pytest -q --collect-only -p no:cacheprovider \
    >/dev/null 2>&1 &
rewrite=$!
.venv/bin/ruff check src tests bench
.venv/bin/lint-imports  # the layers and no import circles ([tool.importlinter] in pyproject.toml)
.venv/bin/python -m mypy  # the annotations, strict ([tool.mypy] in pyproject.toml)
wait "$rewrite" || true  # a module that fails to import is reported by the run itself
# Test files run in parallel, one file per worker at a time (--dist loadfile keeps a file's
# module fixtures, such as its servers, in one process), four workers on 2 cores: much of a
# worker's time is spent waiting (servers starting, restarts, fault windows). On 2 cores three
# workers took 541 s where two took 666 s; once the tests' processes were forked
# (voxcache.testing.forked), four took 328.6-341.5 s where three took 364.9-371.3 s (an AMD
# EPYC host; four took 365.6-453.6 s on a noisier Intel Xeon one). Two tests
# that failed once under four workers' load failed for causes now fixed: a dashboard click
# lost to a table redraw, and chaos kills that began before any take was stored
# (docs/internals/testing.md).
# Files with slow tests are handed out first (tests/conftest.py orders them; xdist's
# reordering by test count is off), so no long file is left to run alone at the end. (A
# three-node test once served two takes of one key under load: leases that time out fail
# open, and duplicate takes did not converge. Publication now makes them converge;
# tests/tiers/cluster/test_one_take.py holds it under loaded CPUs and a slow Redis.)
parallel=()
if [ "$(nproc)" -ge 2 ]; then
    parallel=(-n 4 --dist loadfile --no-loadscope-reorder)
fi
# numpy's OpenBLAS starts a thread per core in every process and spins them after each
# call; the suite runs more workers than cores and starts ~650 Python processes, none of which
# needs a parallel BLAS (voxcache's own array work is element-wise).
export OPENBLAS_NUM_THREADS=1
# --durations=20: the slowest phases named in every run, where the time goes
exec .venv/bin/python -m pytest -q --durations=20 "${parallel[@]}" "$@"
