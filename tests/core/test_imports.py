"""The core imports no engine and no server it does not use (Piper is GPL-3.0, an extra)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys, tempfile
import voxcache
from voxcache import Cache, CachedEngine, SynthesisRequest, load_engine
cached = CachedEngine(load_engine("tone"), Cache(tempfile.mkdtemp()))
assert cached.synthesize(SynthesisRequest("hello.")).cache == "miss"
heavy = {"piper", "onnxruntime", "fastapi", "starlette", "uvicorn", "redis", "boto3", "httpx"}
print(sorted(heavy & {name.split(".")[0] for name in sys.modules}))
"""


def test_core_with_the_tone_engine_loads_no_optional_part():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
