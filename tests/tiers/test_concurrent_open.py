"""Several processes opening one fresh cache folder at the same instant all succeed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from voxcache.testing import forked

OPEN = ("import sys, time; from voxcache.cache import Cache\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "Cache(sys.argv[1]).close(); print('ok')")


@pytest.mark.slow
def test_simultaneous_first_opens_of_a_fresh_folder(tmp_path):
    for trial in range(6):
        folder = tmp_path / f"cache-{trial}"
        start = time.time() + 1.5
        procs = [forked.popen([sys.executable, "-c", OPEN, str(folder), str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(6)]
        outputs = [p.communicate(timeout=60) for p in procs]
        failures = [err for out, err in outputs if out.strip() != "ok"]
        assert not failures, failures[0]
