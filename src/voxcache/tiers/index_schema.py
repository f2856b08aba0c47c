"""The index database's schema: the disk tier's tables, the folder's other stores, and
what a rebuild from the files must carry over because the files cannot say it.

One SQLite database per cache folder: besides the entries and the eviction policy's
state it holds the model-upgrade aliases (``policies.upgrades``), the ask/miss usage
(``policies.usage``) and the workers' shared history (``service.history``), so one
write-ahead log and one repair path (``tiers.repair``) serve them all. Folders that
still hold the old ``aliases``/``usage``/``history`` files are absorbed in place
(``tiers.absorb``).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    size INTEGER NOT NULL,
    created REAL NOT NULL,
    expires REAL,
    last_access REAL NOT NULL,
    hits INTEGER NOT NULL DEFAULT 0,
    score REAL NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0,
    pin_until REAL,
    tenant TEXT NOT NULL DEFAULT '',
    engine TEXT NOT NULL DEFAULT '',
    model TEXT NOT NULL DEFAULT '',
    voice TEXT NOT NULL DEFAULT '',
    text TEXT NOT NULL DEFAULT '',
    parent TEXT NOT NULL DEFAULT '',
    cost REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS entries_by_score ON entries(pinned, score);
CREATE INDEX IF NOT EXISTS entries_by_expiry ON entries(expires) WHERE expires IS NOT NULL;
CREATE INDEX IF NOT EXISTS entries_by_parent ON entries(parent) WHERE parent != '';
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('disk_bytes', 0), ('disk_entries', 0);
CREATE TRIGGER IF NOT EXISTS entries_added AFTER INSERT ON entries BEGIN
    UPDATE counters SET value = value + NEW.size WHERE name = 'disk_bytes';
    UPDATE counters SET value = value + 1 WHERE name = 'disk_entries';
END;
CREATE TRIGGER IF NOT EXISTS entries_removed AFTER DELETE ON entries BEGIN
    UPDATE counters SET value = value - OLD.size WHERE name = 'disk_bytes';
    UPDATE counters SET value = value - 1 WHERE name = 'disk_entries';
END;
CREATE TABLE IF NOT EXISTS ghosts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    score REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS policy (name TEXT PRIMARY KEY, value REAL NOT NULL);
INSERT OR IGNORE INTO policy VALUES ('clock', 0);
CREATE TABLE IF NOT EXISTS purged (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    tenant TEXT NOT NULL DEFAULT '',
    until REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pack_sequences (
    key_id TEXT PRIMARY KEY,
    sequence INTEGER NOT NULL,
    digest TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS savings (
    bucket INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    voice TEXT NOT NULL,
    hits INTEGER NOT NULL,
    chars INTEGER NOT NULL,
    seconds REAL NOT NULL,
    PRIMARY KEY (bucket, tenant, voice)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS callers (
    key TEXT NOT NULL,
    caller TEXT NOT NULL,
    seen REAL NOT NULL,
    PRIMARY KEY (key, caller)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refused (
    key TEXT PRIMARY KEY,
    reason TEXT NOT NULL,
    tenant TEXT NOT NULL,
    at REAL NOT NULL,
    times INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS aliases (lineage TEXT PRIMARY KEY, key TEXT NOT NULL,
    model TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS usage (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, tenant TEXT NOT NULL, engine TEXT NOT NULL,
    model TEXT NOT NULL, voice TEXT, instruct TEXT, text TEXT NOT NULL, payload TEXT NOT NULL,
    asked INTEGER NOT NULL, missed INTEGER NOT NULL, last REAL NOT NULL);
CREATE INDEX IF NOT EXISTS usage_by_missed ON usage(missed);
CREATE INDEX IF NOT EXISTS usage_by_asked ON usage(asked);
CREATE TABLE IF NOT EXISTS history_workers (worker TEXT PRIMARY KEY, pid INTEGER NOT NULL,
    started REAL NOT NULL, seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS history_totals (worker TEXT NOT NULL, sample TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (worker, sample)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_deltas (bucket INTEGER NOT NULL, sample TEXT NOT NULL,
    value REAL NOT NULL, PRIMARY KEY (bucket, sample)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS history_levels (bucket INTEGER NOT NULL, worker TEXT NOT NULL,
    sample TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (bucket, worker, sample))
    WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS absorbed (name TEXT PRIMARY KEY, file TEXT NOT NULL);
"""

MIGRATIONS: tuple[tuple[str, str], ...] = (
    ("parent", "ALTER TABLE entries ADD COLUMN parent TEXT NOT NULL DEFAULT '';"),
    ("cost", "ALTER TABLE entries ADD COLUMN cost REAL NOT NULL DEFAULT 0;"
             # scores of the old policy were seconds since 1970: rank the old rows by their
             # hits under the new one (at clock 0: an index without costs has no clock yet),
             # or they would outlive every new take
             "UPDATE entries SET score = vx_score(NULL, hits, cost, size, 0, kind);"
             "DROP INDEX IF EXISTS entries_by_kind_score;"),
)
"""Columns added since the first schema, with the statements that add each to an old index."""


FOLDER_TABLES = ("aliases", "usage", "history_workers", "history_totals", "history_deltas",
                 "history_levels", "absorbed")
"""The folder's stores that used to be files of their own (``tiers.absorb``)."""

DURABLE_TABLES = ("purged", "pack_sequences", "savings", "callers", "refused", *FOLDER_TABLES)
"""Tables that are not derived from the files, so a rebuild of the index must carry them
over (``carry_over``): purged keys (``tiers.purged``), the pack sequences seen per
publisher (``packs.sequence``), the savings ledger (``policies.savings``), the distinct
callers of keys not yet admitted and the takes the quality gate refused
(``policies.admit``), and the folder's stores (``FOLDER_TABLES``). Added to an old index
by the schema itself."""

SALVAGED = ("counters", *DURABLE_TABLES)
"""What a rebuild from the files cannot know, so it is carried over (``carry_over``)."""
Salvage = dict[str, list[tuple[Any, ...]]]
"""Rows of the ``SALVAGED`` tables that still read, by table."""


SALVAGE_FILTERS = {"usage": "json_valid(payload)", "history_totals": "json_valid(sample)",
                   "history_deltas": "json_valid(sample)",
                   "history_levels": "json_valid(sample)"}
"""Rows a damaged file may give back with their long text zeroed (an overflow page past a
truncation reads as zeros) are carried over only when that text still parses."""


def salvage(db: sqlite3.Connection) -> Salvage:
    """The rows of the ``SALVAGED`` tables that still read through ``db``."""
    found: Salvage = {}
    for table in SALVAGED:
        with contextlib.suppress(sqlite3.Error):
            found[table] = db.execute(f"SELECT * FROM {table} WHERE "
                                      f"{SALVAGE_FILTERS.get(table, '1')}").fetchall()
    return found


REBUILDING = "INSERT OR REPLACE INTO policy VALUES ('rebuilding', 1);"
"""Marks an index that does not yet hold a row for every stored entry: born empty in a
folder that holds something, or set up in place of a damaged one. ``repair`` walks the
folder and clears the mark; whoever finds it with no rebuild running starts one."""
