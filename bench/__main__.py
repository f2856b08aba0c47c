"""``python -m bench [--quick] [--repeat N] [--only NAME[,NAME]] [--out DIR]``: run, report."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

from .helpers.core import Context
from .suite import report
from .suite.registry import BENCHMARKS


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions and smaller sizes (CI smoke: under 2 minutes)")
    parser.add_argument("--only", default="",
                        help=f"comma-separated benchmarks to run: {', '.join(BENCHMARKS)}")
    parser.add_argument("--repeat", type=int, default=5,
                        help="rounds of every interleaved headline ratio (default 5)")
    parser.add_argument("--out", default="bench-results", help="folder for the report")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks; a benchmark that fails is reported and the rest still run."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    chosen = [n.strip() for n in args.only.split(",") if n.strip()] or list(BENCHMARKS)
    unknown = [n for n in chosen if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="voxcache-bench-"))
    ctx = Context(quick=args.quick, out=out, work=work, repeat=max(1, args.repeat))
    load_before = os.getloadavg()
    commit = report.machine().get("commit", "?")  # the code measured: HEAD may move
    failed: list[str] = []
    started = time.perf_counter()
    try:
        for name in chosen:
            module = BENCHMARKS[name]
            ctx.current = name
            print(f"[{time.perf_counter() - started:6.1f}s] {name}: {module.TITLE}", flush=True)
            try:
                module.run(ctx)
            except Exception as exc:  # report it and go on: one broken peer must not hide the rest
                failed.append(name)
                ctx.note(f"FAILED: {type(exc).__name__}: {exc}")
                traceback.print_exc()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    report.write(ctx, {n: BENCHMARKS[n].TITLE for n in chosen}, argv, elapsed, load_before,
                     commit)
    print(f"done in {elapsed:.0f} s; report in {out}/results.md", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
