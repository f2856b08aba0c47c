#!/usr/bin/env bash
# Install everything (system packages, venv, extras) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VOXCACHE_EXTRAS=all,test bash scripts/setup.sh sox:sox chromium:chromium nginx:nginx wrk:wrk prometheus:prometheus promtool:prometheus redis-server:redis-server redis-cli:redis-tools espeak-ng:espeak-ng
.venv/bin/ruff check src tests bench
.venv/bin/lint-imports  # the layers and no import circles ([tool.importlinter] in pyproject.toml)
# Test files run in parallel, one file per worker at a time (--dist loadfile keeps a
# file's module fixtures, such as its servers, in one process): the suite mostly waits on
# subprocesses and servers, so two workers on two cores take ~0.57x the time of one.
exec .venv/bin/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile "$@"
