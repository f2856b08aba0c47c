"""The chaos run's figures as a table (rich); the same figures go to JSON unchanged."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table


def _shown(value: Any) -> str:
    if value is None:
        return "not measurable"
    if isinstance(value, dict):
        return "\n".join(f"{k}: {v:,}" for k, v in sorted(value.items(), key=lambda kv: -kv[1])) \
            or "none"
    if isinstance(value, list):
        return "\n".join(str(v) for v in value) or "none"
    return f"{value:,}" if isinstance(value, int) else str(value)


def rows(figures: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(section, figure, value) in the order a reader wants them."""
    p, m, k = figures["parameters"], figures["machine"], figures["kills"]
    r, v, s = figures["readers"], figures["verification"], figures["seconds"]
    before, left = figures["before_restart"], figures["leftovers_after_restart"]
    return [
        ("run", "engine", p["engine"]),
        ("run", "writers / readers", f"{p['writers']} / {p['readers']}"),
        ("run", "share of kills aimed into Cache.put", p["aimed_share"]),
        ("run", "machine", f"{m['cores']} cores, {m['cpu']}"),
        ("run", "voxcache measured", figures["library"]["git_commit"]
         or figures["library"]["path"]),
        ("run", "duration: warm-up / kills / audit (s)",
         f"{s['warm_up']} / {s['kills']} / {s['audit']}"),
        ("kills", "kills (SIGKILL)", k["total"]),
        ("kills", "  aimed / uniform", f"{k['aimed']} / {k['uniform']}"),
        ("kills", "kills mid-write (inside Cache.put, by marker)", k["mid_write"]),
        ("kills", "  where inside Cache.put (by the folder)", k["mid_write_where"]),
        ("kills", "kills that left a temp file (by the folder)", k["temp_file_left"]),
        ("kills", "phase at death", k["phase_at_death"]),
        ("kills", "writes begun / finished", f"{k['writes_begun']:,} / {k['writes_finished']:,}"),
        ("kills", "writers that died by themselves", k["writer_crashes"]),
        ("readers", "takes served by readers", r["served"]),
        ("readers", "torn or wrong takes served", r["torn_or_wrong_served"]),
        ("readers", "misses / errors", f"{r['misses']:,} / {r['errors']:,}"),
        ("restart", "temp files before restart", before["temp_files"]),
        ("restart", "per-key lock files before restart", before["key_lock_files"]),
        ("restart", "quarantined during the run", before["quarantined"]),
        *[("restart", f"leftover after restart: {name.replace('_', ' ')}", value)
          for name, value in left.items()],
        ("verify", "stored takes", v["stored"]),
        ("verify", "verified against a fresh render", v["verified"]),
        ("verify", "mismatched (wrong samples)", v["mismatched"]),
        ("verify", "refused by Cache.get (quarantined)", v["not_served"]),
        ("verify", "under an unknown key", v["unknown"]),
    ]


def print_table(figures: dict[str, Any], console: Console | None = None) -> None:
    """Print the figures, then the verdict."""
    console = console or Console(width=None if sys.stdout.isatty() else 110)
    table = Table(title="voxcache chaos: kill -9 writers, serve, restart, verify")
    table.add_column("")
    table.add_column("figure")
    table.add_column("value", justify="right", overflow="fold")
    last = None
    for section, name, value in rows(figures):
        table.add_row(section if section != last else "", name, _shown(value))
        last = section
    console.print(table)
    broken = figures["broken_promises"]
    if broken:
        console.print("[bold red]BROKEN:[/] " + "; ".join(broken))
    else:
        console.print("[bold green]held:[/] no torn or wrong take served or stored, "
                      "no leftover after restart")
