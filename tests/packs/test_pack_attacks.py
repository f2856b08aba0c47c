"""Packs under attack: what an import stores is exactly what the signed manifest names, or nothing.

Every test builds a real pack from real entries (the tone engine: the pack format does
not care what made the audio), tampers with it the way an attacker or a bad link
would, imports it into a fresh cache and checks the one invariant that matters —
every entry stored is byte-identical to the publisher's, and what could not be
verified is not stored — plus the refusal the operator sees.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from voxcache import Audio, Cache, CachedEngine, SynthesisRequest
from voxcache.engines.tone import ToneEngine
from voxcache.entry import audio_entry, decode
from voxcache.key import digest
from voxcache.packs import Selection, export_pack, import_pack
from voxcache.packs.container import BadPack
from voxcache.packs.signing import (
    UntrustedPack,
    generate,
    load_public_key,
    load_signing_key,
)
from voxcache.testing import forked

from .nodes import clean_env, cli, cli_json, entry_files

TEXTS = ["Doors one.", "Doors two.", "Mind the gap, please.", "Welcome aboard."]


@pytest.fixture
def signer(tmp_path: Path):
    generate(tmp_path / "k")
    return load_signing_key(tmp_path / "k"), load_public_key(tmp_path / "k.pub")


@pytest.fixture
def source(tmp_path: Path) -> Cache:
    cache = Cache(tmp_path / "source")
    cached = CachedEngine(ToneEngine(), cache)
    for text in TEXTS:
        cached.synthesize(SynthesisRequest(text))
    cache.folder.flush()
    yield cache
    cache.close()


def pack_of(source: Cache, key) -> bytes:
    out = io.BytesIO()
    export_pack(source, out, Selection(), key)
    return out.getvalue()


def import_into(folder: Path, data: bytes, trusted) -> tuple[object, dict[str, bytes]]:
    """(the report, or the refusal raised) and what the folder then holds."""
    cache = Cache(folder)
    try:
        outcome: object = import_pack(cache, io.BytesIO(data), trusted)
    except (UntrustedPack, BadPack, ValueError) as exc:
        outcome = exc
    finally:
        cache.close()
    return outcome, entry_files(folder)


def members(data: bytes) -> list[tuple[str, int, int]]:
    """(name, first data byte, size) of each member of a pack."""
    found = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for info in tar.getmembers():
            found.append((info.name, info.offset_data, info.size))
    return found


def repack(entries: list[tuple[str, bytes]]) -> bytes:
    """A tar of exactly these members (for packs an attacker assembles by hand)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def unpack(data: bytes) -> list[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(m.name, tar.extractfile(m).read()) for m in tar.getmembers()]


def resign(entries: list[tuple[str, bytes]], key, edit) -> list[tuple[str, bytes]]:
    """The pack with its manifest changed by ``edit`` and signed again with ``key``: what a
    trusted publisher with a bug (or a stolen key) could ship."""
    manifest = json.loads(entries[0][1])
    edit(manifest)
    data = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return [("manifest.json", data), ("manifest.sig", json.dumps(key.sign(data)).encode()),
            *entries[2:]]


def test_a_flipped_byte_anywhere_stores_nothing_unverified(tmp_path, source, signer):
    key, pub = signer
    data = pack_of(source, key)
    originals = entry_files(source.root)
    layout = members(data)
    manifest_end = layout[1][1] + layout[1][2]
    offsets = sorted(set(range(0, len(data), 67)) | {
        start + size // 2 for _, start, size in layout})
    outcomes = {"untrusted": 0, "entry refused": 0, "cut short": 0, "clean": 0}
    for n, offset in enumerate(offsets):
        flipped = bytearray(data)
        flipped[offset] ^= 0x20
        outcome, stored = import_into(tmp_path / f"t{n}", bytes(flipped), [pub])
        for stored_key, blob in stored.items():
            assert blob == originals[stored_key], f"flip at {offset} stored a changed entry"
        inside = [name for name, start, size in layout if start <= offset < start + size]
        if offset < manifest_end:
            assert not stored, f"flip at {offset} (manifest, signature) still imported"
        if inside and inside[0].startswith("objects/"):
            assert inside[0].rsplit("/", 1)[1][:64] not in stored
        if isinstance(outcome, Exception):
            outcomes["untrusted"] += 1
        elif outcome.refused:
            outcomes["entry refused"] += 1
        elif outcome.truncated:
            outcomes["cut short"] += 1
        else:
            outcomes["clean"] += 1  # the byte was padding, never read as data
    assert outcomes["untrusted"] and outcomes["entry refused"] and outcomes["cut short"]


def test_swapped_entries_are_refused(tmp_path, signer):
    """Two entries of exactly one size trade places in the archive: sizes match their lines,
    so it is the BLAKE3 of each that refuses them."""
    key, pub = signer
    source = Cache(tmp_path / "source")
    names = []
    for text in ("Doors one.", "Doors two.", "Doors six."):
        entry_key = digest({"text": text})
        pcm = Audio.from_float(np.sin(np.arange(800) * len(names) / 7.0), 16000)
        source.put(audio_entry(entry_key, pcm, meta={"tenant": "default", "text": text},
                               now=1_700_000_000.0))
        names.append(entry_key)
    source.folder.flush()
    entries = unpack(pack_of(source, key))
    source.close()
    assert len({len(blob) for _, blob in entries[2:]}) == 1
    swapped = [*entries[:2], (entries[2][0], entries[3][1]), (entries[3][0], entries[2][1]),
               *entries[4:]]
    report, stored = import_into(tmp_path / "t", repack(swapped), [pub])
    moved = {entries[2][0].rsplit("/", 1)[1][:64], entries[3][0].rsplit("/", 1)[1][:64]}
    assert set(report.refused) == moved
    assert all("BLAKE3" in why for why in report.refused.values())
    assert set(stored) == set(names) - moved


@pytest.mark.parametrize("lie", ["checksum of another entry", "tenant", "kind", "size"])
def test_a_signed_manifest_line_that_lies_is_refused_for_that_entry(tmp_path, source, signer,
                                                                    lie):
    """Even a manifest the trusted key signed cannot get a wrong entry stored: each line is
    checked against the envelope (the key the file was stored under, its kind, its tenant)."""
    key, pub = signer
    entries = unpack(pack_of(source, key))
    victim = json.loads(entries[0][1])["entries"][0]["key"]
    other = [(n, b) for n, b in entries[2:] if victim not in n][0]

    def edit(manifest: dict) -> None:
        line = next(x for x in manifest["entries"] if x["key"] == victim)
        if lie == "checksum of another entry":  # with the other entry's bytes under its name
            import blake3

            line["blake3"] = blake3.blake3(other[1]).hexdigest()
            line["size"] = len(other[1])
        elif lie == "tenant":
            line["tenant"] = "someone-else"
        elif lie == "kind":
            line["kind"] = "encoded"
        else:
            line["size"] += 1

    tampered = resign(entries, key, edit)
    if lie == "checksum of another entry":
        tampered = [(n, other[1] if victim in n else b) for n, b in tampered]
    if lie == "kind":
        tampered = [(n.replace(".wav", ".vxc") if victim in n else n, b) for n, b in tampered]
    report, stored = import_into(tmp_path / "t", repack(tampered), [pub])
    assert victim in report.refused and victim not in stored, report.describe()
    assert len(stored) == len(TEXTS) - 1
    originals = entry_files(source.root)
    assert all(originals[k] == v for k, v in stored.items())


def test_an_altered_manifest_or_an_untrusted_signer_imports_nothing(tmp_path, source, signer):
    key, pub = signer
    entries = unpack(pack_of(source, key))
    manifest = entries[0][1].replace(b'"tenant":"default"', b'"tenant":"defaulx"', 1)
    altered = repack([("manifest.json", manifest), *entries[1:]])
    outcome, stored = import_into(tmp_path / "a", altered, [pub])
    assert isinstance(outcome, UntrustedPack) and "altered" in str(outcome)
    assert stored == {}

    generate(tmp_path / "stranger")
    stranger = load_signing_key(tmp_path / "stranger")
    outcome, stored = import_into(tmp_path / "b", pack_of(source, stranger), [pub])
    assert isinstance(outcome, UntrustedPack) and stranger.id in str(outcome)
    assert stored == {}


def test_the_cli_refuses_an_untrusted_pack_with_exit_2(tmp_path, source, signer):
    key, _ = signer
    (tmp_path / "pack").write_bytes(pack_of(source, key))
    cli("pack", "keygen", "-o", str(tmp_path / "other"))
    done = cli("--cache-dir", str(tmp_path / "t"), "pack", "import", str(tmp_path / "pack"),
               "--trust", str(tmp_path / "other.pub"), check=False)
    assert done.returncode == 2
    assert "not trusted here" in done.stderr and key.id in done.stderr
    assert entry_files(tmp_path / "t") == {}


def test_members_the_manifest_does_not_name_are_never_written(tmp_path, source, signer):
    key, pub = signer
    entries = unpack(pack_of(source, key))
    sneaky = [*entries, ("../../escape.wav", entries[2][1]),
              ("objects/00/00/" + "0" * 64 + ".wav", entries[2][1])]
    report, stored = import_into(tmp_path / "t", repack(sneaky), [pub])
    assert set(report.refused) == {"../../escape.wav", "objects/00/00/" + "0" * 64 + ".wav"}
    assert len(stored) == len(TEXTS) and not (tmp_path / "escape.wav").exists()
    assert not list(tmp_path.rglob("escape.wav"))

    link = io.BytesIO()  # a symlink member: the reader stops there, nothing follows it
    with tarfile.open(fileobj=link, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in entries[:2]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo(entries[2][0])
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    report, stored = import_into(tmp_path / "u", link.getvalue(), [pub])
    assert "not a regular file" in report.truncated and stored == {}
    assert len(report.missing) == len(TEXTS)


def test_importing_twice_changes_nothing(tmp_path, source, signer):
    key, pub = signer
    pack = tmp_path / "pack"
    pack.write_bytes(pack_of(source, key))
    target = tmp_path / "t"
    first = cli_json("--cache-dir", str(target), "pack", "import", str(pack), "--trust",
                     str(Path(pub.source)))
    assert first["imported"] == len(TEXTS) and first["complete"]
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
              for p in (target / "objects").rglob("*.wav")}
    index_before = cli_json("--cache-dir", str(target), "stats")["tiers"]["disk"]
    second = cli_json("--cache-dir", str(target), "pack", "import", str(pack), "--trust",
                      str(Path(pub.source)))
    assert second["imported"] == 0 and second["skipped"] == len(TEXTS) and second["complete"]
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes())
             for p in (target / "objects").rglob("*.wav")}
    assert after == before
    assert cli_json("--cache-dir", str(target), "stats")["tiers"]["disk"] == index_before


def test_a_killed_import_resumed_completes(tmp_path, signer):
    """The importer reads the pack through a FIFO the test feeds: it is killed (SIGKILL) after
    a part of the entries arrived; every file it left verifies, and running the import again
    brings in exactly the rest."""
    key, pub = signer
    source = Cache(tmp_path / "source")
    cached = CachedEngine(ToneEngine(), source)
    for i in range(40):
        cached.synthesize(SynthesisRequest(f"Announcement number {i}, platform {i % 7}."))
    source.folder.flush()
    data = pack_of(source, key)
    source.close()
    (tmp_path / "pack").write_bytes(data)
    layout = members(data)
    cut = layout[len(layout) // 2][1]  # mid-way: inside the 20th entry or so
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    target = tmp_path / "t"
    proc = forked.popen([sys.executable, "-m", "voxcache.cli", "--cache-dir", str(target),
                         "pack", "import", str(fifo), "--trust", str(Path(pub.source))],
                        env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(fifo, "wb") as feed:
        feed.write(data[:cut])
        feed.flush()
        deadline = time.monotonic() + 60
        while len(entry_files(target)) < len(layout) // 2 - 3:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    left = entry_files(target)
    assert 0 < len(left) < 40
    for stored_key, blob in left.items():
        decode(blob, stored_key)  # whole and verified, or not there at all
    resumed = cli_json("--cache-dir", str(target), "pack", "import", str(tmp_path / "pack"),
                       "--trust", str(Path(pub.source)))
    assert resumed["complete"] and resumed["skipped"] == len(left)
    assert resumed["imported"] == 40 - len(left)
    assert entry_files(target) == entry_files(tmp_path / "source")


def test_a_delta_pack_carries_only_what_the_edge_lacks(tmp_path, source, signer):
    key, pub = signer
    edge = tmp_path / "edge"
    edge_cache = Cache(edge)
    cached = CachedEngine(ToneEngine(), edge_cache)
    for text in TEXTS[:2]:  # the edge already rendered two of the four itself
        cached.synthesize(SynthesisRequest(text))
    edge_cache.close()
    manifest = tmp_path / "edge-manifest.json"
    cli("--cache-dir", str(edge), "pack", "manifest", "-o", str(manifest))
    delta = tmp_path / "delta.vxpack"
    exported = cli_json("--cache-dir", str(source.root), "pack", "export", "--sign",
                        str(tmp_path / "k"), "-o", str(delta), "--delta", str(manifest))
    held = set(entry_files(edge))
    carried = {m[0].rsplit("/", 1)[1][:64] for m in members(delta.read_bytes())[2:]}
    assert carried == set(entry_files(source.root)) - held and len(carried) == 2
    assert exported["delta"]["entries"] == 2
    report = cli_json("--cache-dir", str(edge), "pack", "import", str(delta), "--trust",
                      str(Path(pub.source)))
    assert report["imported"] == 2 and report["complete"]
    assert set(entry_files(edge)) == set(entry_files(source.root))
