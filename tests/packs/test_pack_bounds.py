"""Packs under attack, by the numbers a tar header carries: every size and count is bounded
before it is used, memory stays flat, and the import report places every line it saw.

Each hostile file is imported by the real CLI (``python -m voxcache.cli pack import``)
run under a small wrapper that reports the child's peak RSS (``getrusage``), so a read
of the rest of the file — 400 MiB here, sparse so it costs no disk — shows as memory.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.engines.tone import ToneEngine
from voxcache.packs import Selection, export_pack
from voxcache.packs.signing import generate, load_signing_key

from .nodes import clean_env, entry_files

MIB = 2**20
HOSTILE_TAIL = 400 * MIB
"""What a hostile file holds after its bad header: a read of "the rest" shows as RSS."""
CLI_PEAK = 160 * MIB
"""Far above what an import that refuses at once needs (~55 MiB: Python and the cache),
far below a read of the hostile tail."""
MANIFEST_CAP = 256 * MIB

_MEASURE = """
import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"code": done.returncode, "stdout": done.stdout, "stderr": done.stderr,
                  "peak": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""


def measured_import(folder: Path, pack: Path, pub: Path) -> dict:
    """``voxcache pack import --json`` in a fresh process: its exit code, output and peak
    RSS in bytes (the wrapper's only child is the CLI)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "voxcache.cli",
         "--cache-dir", str(folder), "pack", "import", str(pack), "--trust", str(pub),
         "--json"], capture_output=True, text=True, env=clean_env(), timeout=300, check=True)
    return json.loads(done.stdout)


def header(name: str, size_field: bytes | None = None, size: int = 0) -> bytes:
    """A ustar header for a regular file; ``size_field`` replaces its 12 size bytes (and
    the checksum is made right again, so only the size is hostile)."""
    info = tarfile.TarInfo(name)
    info.size = size
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    if size_field is not None:
        block[124:136] = size_field
        block[148:156] = b" " * 8
        block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


BASE256_MINUS_ONE = b"\xff" * 12
BASE256_MINUS_HUGE = b"\xff" + b"\x00" * 11  # -(2**88)
BASE256_HUGE = b"\x80" + b"\xff" * 11  # 2**88 - 1


@pytest.fixture
def signer(tmp_path: Path):
    generate(tmp_path / "k")
    return load_signing_key(tmp_path / "k"), tmp_path / "k.pub"


def real_pack(tmp_path: Path, key, count: int) -> bytes:
    source = Cache(tmp_path / "source")
    cached = CachedEngine(ToneEngine(), source)
    for i in range(count):
        cached.synthesize(SynthesisRequest(f"Announcement number {i}, platform {i % 7}."))
    source.folder.flush()
    out = io.BytesIO()
    export_pack(source, out, Selection(), key)
    source.close()
    return out.getvalue()


def hostile(path: Path, head: bytes, tail: int = HOSTILE_TAIL) -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + tail)  # sparse: zeros that cost no disk
    return path


@pytest.mark.parametrize("field", [BASE256_MINUS_ONE, BASE256_MINUS_HUGE, BASE256_HUGE],
                         ids=["base-256 -1", "base-256 -2**88", "base-256 2**88-1"])
def test_an_absurd_manifest_size_is_refused_before_a_byte_is_read(tmp_path, signer, field):
    """Before: read(-1) took the whole 400 MiB tail into memory (854 MB RSS), then a
    ValueError traceback, exit 1."""
    _, pub = signer
    pack = hostile(tmp_path / "hostile.vxpack", header("manifest.json", field))
    done = measured_import(tmp_path / "edge", pack, pub)
    assert done["code"] == 2, done
    assert "Traceback" not in done["stderr"]
    assert "not a voxcache pack" in done["stderr"] and "nothing was imported" in done["stderr"]
    assert json.loads(done["stdout"])["error"]["exit_code"] == 2
    assert done["peak"] < CLI_PEAK, f"peak RSS {done['peak'] / MIB:.0f} MiB"
    assert entry_files(tmp_path / "edge") == {}


def test_a_manifest_at_the_cap_costs_at_most_the_cap(tmp_path, signer):
    """The signature follows the manifest, so a manifest must be held before it can be
    believed: at most 256 MiB of it, in one buffer (chunks joined at the end held it
    twice: 581 MB RSS before)."""
    _, pub = signer
    pack = hostile(tmp_path / "big.vxpack", header("manifest.json", size=MANIFEST_CAP))
    done = measured_import(tmp_path / "edge", pack, pub)
    assert done["code"] == 2 and "not a voxcache pack" in done["stderr"], done
    assert done["peak"] < MANIFEST_CAP + CLI_PEAK, f"peak RSS {done['peak'] / MIB:.0f} MiB"
    assert entry_files(tmp_path / "edge") == {}


def test_an_absurd_member_size_after_a_signed_manifest_ends_the_read(tmp_path, signer):
    """A trusted pack with a member appended on the way whose size is base-256 -1: the
    entries before it are imported, the read ends there, memory stays flat (before: the
    400 MiB tail read into memory, then a traceback)."""
    key, pub = signer
    data = real_pack(tmp_path, key, 4)
    body = data.rstrip(b"\0")
    body += b"\0" * (-len(body) % 512)
    pack = hostile(tmp_path / "appended.vxpack", body + header("objects/x.wav",
                                                                BASE256_MINUS_ONE))
    done = measured_import(tmp_path / "edge", pack, pub)
    assert "Traceback" not in done["stderr"], done["stderr"]
    report = json.loads(done["stdout"])
    assert done["code"] == 1 and report["imported"] == 4 and not report["complete"]
    assert "declares -1 bytes" in report["truncated"]
    assert done["peak"] < CLI_PEAK, f"peak RSS {done['peak'] / MIB:.0f} MiB"
    assert entry_files(tmp_path / "edge") == entry_files(tmp_path / "source")


def test_members_no_line_names_are_counted_to_a_bound(tmp_path, signer):
    """20,000 tiny members the manifest does not name, appended to a trusted pack: the
    report names 64 and the read stops (before: all 20,000 in the report, 1.2 MB)."""
    key, pub = signer
    data = real_pack(tmp_path, key, 3)
    body = data.rstrip(b"\0")
    body += b"\0" * (-len(body) % 512)
    strays = b"".join(header(f"objects/zz/{i:08d}.wav", size=1) + b"x" + b"\0" * 511
                      for i in range(20_000))
    (tmp_path / "strays.vxpack").write_bytes(body + strays + b"\0" * 1024)
    done = measured_import(tmp_path / "edge", tmp_path / "strays.vxpack", pub)
    report = json.loads(done["stdout"])
    assert done["code"] == 1 and report["imported"] == 3
    assert len(report["refused"]) == 64, len(report["refused"])
    assert "more than 64 members" in report["truncated"]
    assert placed(report) == report["entries"] == 3


def test_a_pack_cut_inside_an_entry_reports_that_entry(tmp_path, signer):
    """Cut in the middle of an entry's data: that entry is missing, every other line is
    placed, and the lists add up to the manifest's count (before: 39 of 40 — the entry
    the cut ended was in no list)."""
    key, pub = signer
    data = real_pack(tmp_path, key, 40)
    layout = members(data)
    name, start, size = layout[22]
    (tmp_path / "cut.vxpack").write_bytes(data[:start + size // 2])
    done = measured_import(tmp_path / "edge", tmp_path / "cut.vxpack", pub)
    report = json.loads(done["stdout"])
    cut_key = name.rsplit("/", 1)[1][:64]
    assert done["code"] == 1 and report["truncated"]
    assert cut_key in report["missing"] and cut_key not in entry_files(tmp_path / "edge")
    assert report["imported"] == 20 and len(report["missing"]) == 20
    assert placed(report) == report["accounted"] == report["entries"] == 40


def test_a_pack_cut_in_the_padding_after_an_entry_keeps_that_entry(tmp_path, signer):
    """The entry's data arrived whole (its BLAKE3 proves it): it is imported, and the cut
    ends the read after it."""
    key, pub = signer
    data = real_pack(tmp_path, key, 40)
    layout = members(data)
    index = next(i for i in range(10, 40) if layout[i][2] % 512)
    name, start, size = layout[index]
    (tmp_path / "cut.vxpack").write_bytes(data[:start + size + 1])
    done = measured_import(tmp_path / "edge", tmp_path / "cut.vxpack", pub)
    report = json.loads(done["stdout"])
    assert name.rsplit("/", 1)[1][:64] in entry_files(tmp_path / "edge")
    assert report["imported"] == index - 1 and placed(report) == 40


def members(data: bytes) -> list[tuple[str, int, int]]:
    """(name, first data byte, size) of each member of a pack."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [(info.name, info.offset_data, info.size) for info in tar.getmembers()]


def placed(report: dict) -> int:
    """Manifest lines the report puts somewhere (refusals under a member name are members
    no line names, not lines)."""
    lines_refused = [name for name in report["refused"] if "/" not in name]
    return (report["imported"] + report["skipped"] + report["kept"] + report["expired"]
            + len(report.get("purged", [])) + len(lines_refused) + len(report["not_stored"])
            + len(report["missing"]))
