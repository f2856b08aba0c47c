#!/usr/bin/env bash
# Install everything and run the main job: voxcache serve on the embedded default
# (Piper + a disk cache in ./.voxcache); extra arguments go to `voxcache serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VOXCACHE_DIR=${VOXCACHE_DIR:-$PWD/.voxcache}
exec .venv/bin/voxcache serve "$@"
