"""Writing a run out: ``results.md`` (tables), ``results.json`` (every figure), PNG plots.

The markdown is what ``docs/internals/benchmarks.md`` is refreshed from; the JSON is the record a
later run is compared against.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..helpers.core import Context, Table
from ..helpers.machine import cpu_model, load_average


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    info: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    info["cpu_model"] = cpu_model()
    with contextlib.suppress(OSError):  # no load average on this system
        info["loadavg_at_end"] = load_average().split()
    try:
        info["commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
            check=False, cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        info["commit"] = "unknown"
    return info


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 10:
            return f"{value:.1f}"
        if magnitude >= 0.01:
            return f"{value:.3g}" if magnitude < 1 else f"{value:.2f}"
        return f"{value:.2e}"
    return str(value)


def markdown_table(table: Table) -> str:
    """Render one table as GitHub markdown."""
    lines = [f"**{table.title}**", "",
             "| " + " | ".join(table.columns) + " |",
             "|" + "|".join("---" for _ in table.columns) + "|"]
    for row in table.rows:
        lines.append("| " + " | ".join(_fmt(row.get(c, "")) for c in table.columns) + " |")
    for note in table.notes:
        lines.append("")
        lines.append(f"_{note}_")
    return "\n".join(lines)


def headline_table(headline: dict[str, Any], repeat: int) -> list[str]:
    """The headline ratios: interleaved medians with their spread, and which hold still."""
    md = ["## Headline ratios", "",
          f"Each ratio with a spread is the median of {repeat} interleaved rounds "
          "(`bench.helpers.trials`: subject and baseline alternated, warm-up excluded); "
          "*stable* means every round lies within ±5 % of the median. Load is the one-minute "
          "load average before → after the rounds.", "",
          "| ratio | median | spread | stable ±5 % | load | from |", "|---|---|---|---|---|---|"]
    for name, item in headline.items():
        if "rounds" in item:
            stable = "yes" if item["stable"] else "no"
            spread, where = item["spread"], "{:.2f} → {:.2f}".format(*item["load"])
        else:
            stable, spread, where = item.get("stable", "–"), "–", "–"
        md.append(f"| {name} | {_fmt(item['value'])} | {spread} | {stable} | {where} "
                  f"| {item['detail']} |")
    return [*md, ""]


def write(ctx: Context, titles: dict[str, str], argv: list[str], seconds: float,
          load_before: tuple[float, ...] = (), commit: str | None = None) -> None:
    """Write results.md and results.json into ``ctx.out`` (``commit``: the one the run
    started at, which is what it measured)."""
    info = machine()
    if commit:
        info["commit"] = commit
    info["loadavg_at_start"] = [f"{v:.2f}" for v in load_before]
    command = "python -m bench " + " ".join(argv)
    md = [f"# voxcache benchmarks ({'quick' if ctx.quick else 'full'} run)", "",
          f"Command: `{command.strip()}` — {seconds:.0f} s. Machine: {info['cpus']} CPUs "
          f"({info['cpu_model']}), Python {info['python']}, {info['platform']}, "
          f"commit {info.get('commit', '?')}, load average at the start "
          f"{' '.join(info['loadavg_at_start']) or '?'}, at the end "
          f"{' '.join(info.get('loadavg_at_end', []))}.", ""]
    if ctx.headline:
        md += headline_table(ctx.headline, ctx.repeat)
    for bench, title in titles.items():
        tables = [t for t in ctx.tables if t.bench == bench]
        notes = ctx.notes.get(bench, [])
        if not tables and not notes:
            continue
        md += [f"## {title}", ""]
        for note in notes:
            md += [f"> {note}", ""]
        for table in tables:
            md += [markdown_table(table), ""]
        for plot_bench, path in ctx.plots:
            if plot_bench == bench:
                md += [f"![{path.stem}]({path.name})", ""]
    (ctx.out / "results.md").write_text("\n".join(md))
    data = {
        "quick": ctx.quick, "command": command, "seconds": seconds, "machine": info,
        "headline": ctx.headline, "notes": ctx.notes,
        "benchmarks": sorted({t.bench for t in ctx.tables} | set(ctx.notes)),
        "tables": [{"bench": t.bench, "name": t.name, "title": t.title, "columns": t.columns,
                    "rows": t.rows, "notes": t.notes} for t in ctx.tables],
        "plots": [{"bench": b, "file": p.name} for b, p in ctx.plots],
    }
    (ctx.out / "results.json").write_text(json.dumps(data, indent=1, default=_json_default))
    print(f"wrote {ctx.out / 'results.md'} and results.json", file=sys.stderr)


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    return repr(value)
