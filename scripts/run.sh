#!/usr/bin/env bash
# Install everything and run the main job: voxcache on the embedded default (Piper + disk cache).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VOXCACHE_DIR=${VOXCACHE_DIR:-$PWD/.voxcache}
if .venv/bin/voxcache serve --help >/dev/null 2>&1; then
  exec .venv/bin/voxcache serve "$@"
fi
# Before the service exists: render a sentence twice and show the second is a hit.
.venv/bin/voxcache synth "Welcome! Please scan the code on your table to order." -o welcome.wav
.venv/bin/voxcache synth "Welcome! Please scan the code on your table to order." -o welcome.wav
