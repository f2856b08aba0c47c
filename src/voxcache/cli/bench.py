"""``voxcache bench``: run the benchmark suite (``bench/`` at the root of a checkout).

The suite measures voxcache against its peers and the machine's limits, so it needs the
peers installed (``pip install -e '.[bench]'``) and lives beside the package rather than in
it: an installed wheel has no ``bench/`` and says so instead of failing obscurely.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def checkout_root() -> Path | None:
    """The source checkout this package runs from, if it has the suite."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "bench" / "__main__.py").is_file() else None


def register(
        subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``bench`` command."""
    p = subparsers.add_parser("bench", help="run the benchmark suite (from a source checkout)")
    p.add_argument("--quick", action="store_true", help="CI smoke run (under 2 minutes)")
    p.add_argument("--only", default="", help="comma-separated benchmark names")
    p.add_argument("--repeat", type=int, default=None,
                   help="rounds of every interleaved headline ratio (the suite's default: 5)")
    p.add_argument("--out", default="bench-results", help="folder for the report")
    p.set_defaults(handler=bench)


def bench(args: argparse.Namespace) -> int:
    """Run ``python -m bench`` in the checkout; its exit code is ours."""
    root = checkout_root()
    if root is None:
        print("voxcache: error: the benchmark suite lives in a source checkout (bench/ beside "
              "src/); clone the repository and run `pip install -e '.[bench]'` there",
              file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "bench", "--out", str(Path(args.out).resolve())]
    if args.quick:
        command.append("--quick")
    if args.only:
        command += ["--only", args.only]
    if args.repeat is not None:
        command += ["--repeat", str(args.repeat)]
    return subprocess.run(command, cwd=root, check=False).returncode
