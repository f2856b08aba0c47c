"""No pack undoes a purge: sequences per publisher, and tombstones that travel.

The attack (issue 21, item 2): take A is exported in pack P1; A is purged at the center
and a newer pack P2 is imported on the edge; the edge purges B itself; then P1 is
imported again. Before, A and B came back (exit 0, ``complete: true``): a privacy purge
silently reversed. Every step here is the real CLI on real cache folders.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.engines.tone import ToneEngine
from voxcache.tiers.repair import rebuild_damaged

from .nodes import cli, cli_json, entry_files

TEXTS = ["Take A: the store closes in ten minutes.", "Take B: mind the step.",
         "Take C: welcome aboard."]


def rendered(folder: Path) -> list[str]:
    """Render TEXTS into a cache folder; their keys, in order."""
    cache = Cache(folder)
    try:
        cached = CachedEngine(ToneEngine(), cache)
        keys = [cached.synthesize(SynthesisRequest(text)).key for text in TEXTS]
        cache.folder.flush()
    finally:
        cache.close()
    return keys


def export(folder: Path, key: Path, out: Path) -> dict:
    return cli_json("--cache-dir", str(folder), "pack", "export", "--sign", str(key),
                    "-o", str(out))


def import_(folder: Path, pack: Path, *pubs: Path, expect: int = 0) -> dict:
    trust = [arg for pub in pubs for arg in ("--trust", str(pub))]
    return cli_json("--cache-dir", str(folder), "pack", "import", str(pack), *trust,
                    expect=expect)


def purge(folder: Path, key: str) -> None:
    cli("--cache-dir", str(folder), "purge", "--key", key)


def test_an_older_pack_cannot_bring_back_a_purge(tmp_path, keys):
    signing, pub = keys
    center, edge = tmp_path / "center", tmp_path / "edge"
    a, b, c = rendered(center)
    shutil.copytree(center, tmp_path / "center-before")  # what the center held at P1
    p1 = tmp_path / "p1.vxpack"
    assert export(center, signing, p1)["entries"] == 3
    assert import_(edge, p1, pub)["imported"] == 3

    purge(center, a)  # a privacy purge at the center ...
    p2 = tmp_path / "p2.vxpack"
    exported = export(center, signing, p2)
    second = import_(edge, p2, pub)  # ... travels to the edge in the next pack
    assert set(entry_files(edge)) == {b, c}
    assert exported["entries"] == 2 and exported["purged"] == 1
    assert second["removed"] == [a] and second["complete"]

    purge(edge, b)  # and a purge on the edge itself
    assert set(entry_files(edge)) == {c}

    replay = cli("--cache-dir", str(edge), "pack", "import", str(p1), "--trust", str(pub),
                 check=False)
    assert replay.returncode == 2, (replay.stdout, replay.stderr)
    assert "older" in replay.stderr and "nothing was imported" in replay.stderr
    assert set(entry_files(edge)) == {c}

    again = import_(edge, p2, pub)  # the newest pack again: B stays purged
    assert again["purged"] == [b] and again["imported"] == 0 and again["complete"]
    assert set(entry_files(edge)) == {c}

    # Another trusted publisher ships the old takes: no sequence of its own says no, the
    # tombstones do (each covers the take it removed, whoever offers it).
    cli("pack", "keygen", "-o", str(tmp_path / "other.key"))
    p3 = tmp_path / "p3.vxpack"
    export(tmp_path / "center-before", tmp_path / "other.key", p3)
    third = import_(edge, p3, pub, Path(f"{tmp_path / 'other.key'}.pub"))
    assert sorted(third["purged"]) == sorted([a, b]) and third["skipped"] == 1
    assert third["complete"] and set(entry_files(edge)) == {c}


def test_a_take_rendered_again_after_a_purge_is_imported(tmp_path, keys):
    """A tombstone covers the takes it removed, not the key for ever: once the center
    renders A again (a take made after the purge), the next pack brings it."""
    signing, pub = keys
    center, edge = tmp_path / "center", tmp_path / "edge"
    a, _, _ = rendered(center)
    import_(edge, _exported(center, signing, tmp_path / "p1.vxpack"), pub)
    purge(center, a)
    import_(edge, _exported(center, signing, tmp_path / "p2.vxpack"), pub)
    assert a not in entry_files(edge)
    assert rendered(center)[0] == a  # the same phrase, rendered anew
    third = import_(edge, _exported(center, signing, tmp_path / "p3.vxpack"), pub)
    assert third["imported"] == 1 and third["complete"]
    assert entry_files(edge)[a] == entry_files(center)[a]


@pytest.mark.parametrize("how", ["gc --rebuild-index", "damaged at open",
                                 "damaged while open"])
def test_purges_and_sequences_survive_an_index_rebuild(tmp_path, keys, how):
    """Purged keys and pack sequences are not in the files, so a rebuild of the index from
    the files must carry them over: ``gc --rebuild-index`` leaves them alone, and an index
    found damaged at open is rebuilt with the rows they still read (``carry_over``)."""
    signing, pub = keys
    center, edge = tmp_path / "center", tmp_path / "edge"
    a, b, _ = rendered(center)
    p1 = _exported(center, signing, tmp_path / "p1.vxpack")
    import_(edge, p1, pub)
    purge(center, a)
    import_(edge, _exported(center, signing, tmp_path / "p2.vxpack"), pub)
    purge(edge, b)
    if how == "gc --rebuild-index":
        cli("--cache-dir", str(edge), "gc", "--rebuild-index")
    elif how == "damaged at open":
        damage_entries_table(edge / "index.sqlite3")
        assert cli_json("--cache-dir", str(edge), "stats")  # opens, rebuilds
    else:  # the repair a running process makes (tiers.repair)
        cache = Cache(edge)
        try:
            damage_entries_table(edge / "index.sqlite3")
            assert rebuild_damaged(edge, cache.folder.index) is not None
        finally:
            cache.close()
    if how != "gc --rebuild-index":
        assert list((edge / "quarantine").glob("index.sqlite3.*"))
    assert cli("--cache-dir", str(edge), "pack", "import", str(p1), "--trust", str(pub),
               check=False).returncode == 2
    again = import_(edge, Path(tmp_path / "p2.vxpack"), pub)
    assert again["purged"] == [b]
    assert set(entry_files(edge)) == set(entry_files(center)) - {b}


def damage_entries_table(path: Path) -> None:
    """Overwrite the root pages of the ``entries`` table and its indexes (every other
    table's pages intact)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        roots = [row[0] for row in db.execute(
            "SELECT rootpage FROM sqlite_master WHERE tbl_name = 'entries' AND rootpage")]
    with open(path, "r+b") as f:
        for root in roots:
            f.seek((root - 1) * page_size)
            f.write(b"\xa5" * page_size)


def _exported(folder: Path, key: Path, out: Path) -> Path:
    export(folder, key, out)
    return out
