"""Small embedding hits before and after a change to ``voxcache.tensors``, in one run.

``git show <commit>:src/voxcache/tensors.py > /tmp/before.py`` then
``python -m bench.probes.small_before_after /tmp/before.py``: ``DiskTier.get`` of 256 inline
embeddings (100 B, 1 KB, 4 KB) with that file's ``decode_tensor_entry`` (before) and this
tree's (after), and ``diskcache.get`` of the same size's envelopes, interleaved in 10 rounds
of 3,000 calls; prints each round's median ratio to diskcache as median (min–max).
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import voxcache.entry as entry_module

from ..helpers.trials import per_call
from ..suite.inline_candidates import DISKCACHE, TIER_GET, populate, reader

ROUNDS, CALLS = 10, 3_000
SIZES = {"100 B": 100, "1 KB": 1_000, "4 KB": 4_000}


def load(path: str) -> Callable[[bytes, str], object]:
    """``decode_tensor_entry`` of another version of ``voxcache/tensors.py``."""
    spec = importlib.util.spec_from_file_location("voxcache._tensors_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its annotations are resolved through sys.modules
    spec.loader.exec_module(module)
    return module.decode_tensor_entry  # type: ignore[no-any-return]


def main(before_path: str) -> None:
    decoders = {"before": load(before_path), "after": entry_module.decode_tensor_entry}
    for label, size in SIZES.items():
        with tempfile.TemporaryDirectory() as folder:
            measure(label, Path(folder), size, decoders)


def measure(label: str, folder: Path, size: int,
            decoders: dict[str, Callable[[bytes, str], object]]) -> None:
    """One size: the rounds, then a line per decoder."""
    _, handles, _ = populate(folder, size, 256)
    embedding, peer = reader(TIER_GET["embedding"], handles), reader(DISKCACHE, handles)
    after = entry_module.decode_tensor_entry

    def subject(decoder: Callable[[bytes, str], object]) -> Callable[[int], list[float]]:
        def run(n: int) -> list[float]:
            entry_module.decode_tensor_entry = decoder  # type: ignore[assignment]
            try:
                return per_call(embedding, n)
            finally:
                entry_module.decode_tensor_entry = after
        return run

    subjects = {**{name: subject(d) for name, d in decoders.items()},
                "diskcache": lambda n: per_call(peer, n)}
    for run in subjects.values():
        run(300)  # warm-up
    medians: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(ROUNDS):
        for name, run in subjects.items():
            medians[name].append(statistics.median(run(CALLS)))
    base = medians["diskcache"]
    for name in decoders:
        ratios = sorted(a / b for a, b in zip(medians[name], base, strict=True))
        print(f"{label} {name}: {statistics.median(medians[name]) * 1e6:.2f} µs vs "
              f"diskcache {statistics.median(base) * 1e6:.2f} µs; ratio median "
              f"{statistics.median(ratios):.3f} ({ratios[0]:.3f}–{ratios[-1]:.3f}, "
              f"{ROUNDS} rounds)", flush=True)
    handles.close()


if __name__ == "__main__":
    main(sys.argv[1])
