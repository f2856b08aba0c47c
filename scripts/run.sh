#!/usr/bin/env bash
# Install what serving Piper needs and run the main job: voxcache serve on the embedded
# default (Piper + a disk cache in the same folder as the command line's, ~/.cache/voxcache
# or $VOXCACHE_DIR); extra arguments go to `voxcache serve`. Everything else (the shared
# tiers, packs, speaker embeddings with torch, the benchmarks' peers) when asked:
#   VOXCACHE_EXTRAS=all bash scripts/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VOXCACHE_EXTRAS=${VOXCACHE_EXTRAS:-piper,service} bash scripts/setup.sh
echo "voxcache: the command line is $PWD/.venv/bin/voxcache ('. .venv/bin/activate' puts it on PATH)"
exec .venv/bin/voxcache serve "$@"
