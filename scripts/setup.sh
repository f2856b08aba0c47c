#!/usr/bin/env bash
# Shared by run.sh and test.sh: system packages (each "command:package" argument whose
# command is missing), a virtualenv in .venv, and voxcache with the extras in
# $VOXCACHE_EXTRAS (default: piper,service — what serving Piper needs), every package at the
# version in constraints.txt (the set the tests ran with; pyproject.toml gives ranges).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
for pair in "$@"; do
  cmd=${pair%%:*}; pkg=${pair##*:}
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ -z "${PYTHON:-}" ]; then  # the first Python 3.11-3.13 found, 3.11 (the tested one) first
  for candidate in python3.11 python3.12 python3.13 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c \
        'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))'; then
      PYTHON=$candidate
      break
    fi
  done
fi
[ -n "${PYTHON:-}" ] || { echo "voxcache needs Python 3.11, 3.12 or 3.13 (set PYTHON)" >&2; exit 2; }
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -c constraints.txt -e ".[${VOXCACHE_EXTRAS:-piper,service}]"
# Speaker embeddings ([embeddings]): librosa, under resemblyzer's preprocessing, compiles its
# numba kernels on first use and caches them beside its modules (~13 CPU-s once): done here,
# at install, rather than on the first voice a service is sent.
.venv/bin/python - <<'PY'
try:
    import resemblyzer  # noqa: F401  (the extra is installed: warm its kernels)
except ImportError:
    pass
else:
    from voxcache.service.voice_artifacts import shared_encoder
    shared_encoder()
PY
