"""The command line keeps its word: keys as ``ls`` prints them work everywhere, purge
resolves voices as clients name them, every command speaks JSON on request, and exit codes
mean failure only when something failed.

Most commands run in-process through ``voxcache.cli.main`` over the tone engine (fast);
``warm`` runs as a subprocess (it lowers its own CPU priority), and once with real Piper on
the shipped phrase list.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from bench.helpers.fixtures import HOT_PHRASES
from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.cli import main
from voxcache.engine import Engine
from voxcache.engines.tone import ToneEngine
from voxcache.entry import audio_entry
from voxcache.errors import UnsupportedFeature
from voxcache.request import SynthesisRequest, resolve
from voxcache.testing.cli import run_cli as run_voxcache


def cli(capsys: pytest.CaptureFixture[str], cache_dir: Path, *args: str,
        config: Path | None = None) -> tuple[int, str, str]:
    """Run ``voxcache`` in-process over the tone engine; (exit code, stdout, stderr)."""
    argv = ["--cache-dir", str(cache_dir), "--engine", "tone"]
    argv += ["--config", str(config)] if config else []
    try:
        code = main([*argv, *args])
    except SystemExit as exc:  # argparse refusing an option
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys, cache_dir: Path, *args: str, config: Path | None = None) -> object:
    code, out, err = cli(capsys, cache_dir, *args, "--json", config=config)
    assert code == 0, err
    return json.loads(out)  # the whole of stdout is one document


def run_cli(cache_dir: Path, *args: str, engine: str = "tone") -> subprocess.CompletedProcess:
    """``voxcache`` over ``engine`` (in this process), without the developer's VOXCACHE_*."""
    return run_voxcache(["--cache-dir", str(cache_dir), "--engine", engine, *args])


def plant(cache_dir: Path, keys_and_texts: list[tuple[str, str]]) -> None:
    """Store entries under chosen keys (a real cache write: envelope, file, index row)."""
    cache = Cache(cache_dir)
    try:
        for i, (key, text) in enumerate(keys_and_texts):
            pcm = (np.sin(np.arange(1600) * (0.01 + i / 100)) * 8000).astype("<i2").tobytes()
            assert cache.put(audio_entry(key, Audio(pcm, 16000), meta={
                "engine": "tone", "model": "tone-1", "voice": "alto", "text": text,
                "tenant": "default"}))
    finally:
        cache.close()


def stored_files(cache_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (cache_dir / "objects").rglob("*") if p.is_file()}


def ls_keys(capsys, cache_dir: Path) -> list[str]:
    """The keys exactly as ``ls`` prints them (stdout is not a terminal here: one
    tab-separated row per entry under a header line)."""
    code, out, _ = cli(capsys, cache_dir, "ls")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split("\t")[0] == "key"
    return [row.split("\t")[0] for row in rows]


# -- keys like git -------------------------------------------------------------------------

def test_ls_prints_keys_that_pin_explain_and_purge_accept(capsys, cache_dir) -> None:
    cli_json(capsys, cache_dir, "synth", "Gate one is open.")
    cli_json(capsys, cache_dir, "synth", "Gate two is closed.", "--voice", "bass")
    # Two stored keys that share their first 17 digits: a fixed 16-digit form is ambiguous.
    twins = ["0123456789abcdef0" + "1" * 47, "0123456789abcdef0" + "2" * 47]
    plant(cache_dir, [(twins[0], "Twin one."), (twins[1], "Twin two.")])
    full = {r["key"] for r in cli_json(capsys, cache_dir, "ls")}
    shown = ls_keys(capsys, cache_dir)
    assert len(shown) == len(full) == 4
    for short in shown:
        matches = [k for k in full if k.startswith(short)]
        assert len(matches) == 1, f"ls printed {short!r}, which names {len(matches)} keys"
    assert {s for s in shown if s.startswith("0123")} == {twins[0][:18], twins[1][:18]}
    for short in shown:
        (key,) = (k for k in full if k.startswith(short))
        assert cli_json(capsys, cache_dir, "explain", "--key", short)["key"] == key
        assert cli(capsys, cache_dir, "pin", short)[0] == 0
    assert all(r["pinned"] for r in cli_json(capsys, cache_dir, "ls"))
    assert cli(capsys, cache_dir, "unpin", shown[0])[0] == 0
    code, _, err = cli(capsys, cache_dir, "purge", "--key", shown[-1])
    assert code == 0, err
    assert len(cli_json(capsys, cache_dir, "ls")) == 3


def test_key_prefixes_unique_ambiguous_unknown_and_too_short(capsys, cache_dir) -> None:
    crowd = [(f"abcd{i:x}" + "0" * 59, f"Crowd member {i}.") for i in range(7)]
    loner = ("9f" + "e" * 62, "The loner.")
    plant(cache_dir, [*crowd, loner])
    before = stored_files(cache_dir)

    assert cli(capsys, cache_dir, "pin", "9FEE")[0] == 0  # four digits, any case
    assert [r["pinned"] for r in cli_json(capsys, cache_dir, "ls") if r["key"] == loner[0]] \
        == [True]

    code, out, err = cli(capsys, cache_dir, "pin", "abcd")
    assert code == 2 and out == ""
    assert "ambiguous" in err and "7 stored keys" in err and "and 2 more" in err
    assert err.count("Crowd member") == 5  # a few candidates, each with its text
    code, _, err = cli(capsys, cache_dir, "purge", "--key", "abcd")
    assert code == 2 and "ambiguous" in err
    code, _, err = cli(capsys, cache_dir, "explain", "--key", "abcd")
    assert code == 2 and "ambiguous" in err

    code, _, err = cli(capsys, cache_dir, "unpin", "0123")
    assert code == 1 and "no stored entry has a key starting with 0123" in err
    code, _, err = cli(capsys, cache_dir, "purge", "--key", "abcd3", "--key", "0123")
    assert code == 1 and "0123" in err  # one unknown key: nothing at all is deleted
    for bad in ("abc", "abcg", "ab cd", "x" * 64, "a" * 65):
        code, _, err = cli(capsys, cache_dir, "pin", bad)
        assert code == 2 and "at least 4" in err, bad

    assert stored_files(cache_dir) == before
    assert not any(r["pinned"] for r in cli_json(capsys, cache_dir, "ls")
                   if r["key"] != loner[0])
    code, _, err = cli(capsys, cache_dir, "purge", "--key", "abcd3")
    assert code == 0, err
    assert crowd[3][0] not in {r["key"] for r in cli_json(capsys, cache_dir, "ls")}


def test_explain_key_shows_envelope_index_and_hashed_payload(capsys, cache_dir) -> None:
    text = "Platform four. Mind the gap."
    synth = cli_json(capsys, cache_dir, "synth", text, "--voice", "bass")
    asked = cli_json(capsys, cache_dir, "explain", text, "--voice", "bass")
    info = cli_json(capsys, cache_dir, "explain", "--key", synth["key"][:6])
    assert info["key"] == synth["key"] == asked["key"] and info["verified"] is True
    assert info["envelope"]["key"] == synth["key"]
    assert info["envelope"]["meta"]["text"] == text and info["index"]["voice"] == "bass"
    assert info["request"]["payload"] == asked["payload"]  # what was hashed, as explain says
    code, out, _ = cli(capsys, cache_dir, "explain", "--key", synth["key"][:6])
    assert code == 0 and synth["key"] in out and "verified" in out and '"voice": "bass"' in out

    path = Path(info["path"])
    blob = bytearray(path.read_bytes())
    blob[-10] ^= 0xFF
    path.write_bytes(bytes(blob))
    damaged = cli_json(capsys, cache_dir, "explain", "--key", synth["key"][:6])
    assert damaged["verified"] is False and "checksum" in damaged["problem"]
    assert path.read_bytes() == bytes(blob)  # explaining reads; it moves nothing

    code, _, err = cli(capsys, cache_dir, "explain", text, "--key", synth["key"][:6])
    assert code == 2 and "one or the other" in err
    code, _, err = cli(capsys, cache_dir, "explain", "--voice", "bass", "--key", "abcd")
    assert code == 2 and "--voice" in err


# -- purge ---------------------------------------------------------------------------------

def test_purge_voice_through_a_config_alias_dry_run_then_for_real(capsys, tmp_path) -> None:
    cache_dir = tmp_path / "cache"
    config = tmp_path / "voxcache.toml"
    config.write_text('[voice_aliases]\nnova = "bass"\n')
    for text, voice in [("One.", "bass"), ("Two.", "bass"), ("Three.", "alto")]:
        cli_json(capsys, cache_dir, "synth", text, "--voice", voice)
    before = stored_files(cache_dir)

    dry = cli_json(capsys, cache_dir, "purge", "--voice", "nova", "--dry-run", config=config)
    assert dry["voice"]["canonical"] == "bass" and "[voice_aliases]" in dry["voice"]["how"]
    assert (dry["dry_run"], dry["matched"], dry["deleted"]) == (True, 2, 0)
    assert sorted(e["text"] for e in dry["entries"]) == ["One.", "Two."]
    code, out, _ = cli(capsys, cache_dir, "purge", "--voice", "nova", "--dry-run",
                       config=config)
    assert code == 0 and "would be purged" in out and "nothing was deleted" in out
    assert stored_files(cache_dir) == before  # byte for byte
    assert len(cli_json(capsys, cache_dir, "ls")) == 3

    code, out, _ = cli(capsys, cache_dir, "purge", "--voice", "nova", config=config)
    assert code == 0 and "purged 2 entries" in out
    assert [r["text"] for r in cli_json(capsys, cache_dir, "ls")] == ["Three."]
    assert len(stored_files(cache_dir)) == 1
    again = cli_json(capsys, cache_dir, "synth", "One.", "--voice", "bass")
    assert again["cache"] == "miss"  # gone from every tier, not only the index

    # An OpenAI voice name means the default voice, as the service resolves it.
    alloy = cli_json(capsys, cache_dir, "purge", "--voice", "alloy", "--dry-run")
    assert alloy["voice"]["canonical"] == "alto" and alloy["matched"] == 1
    code, _, err = cli(capsys, cache_dir, "purge", "--voice", "nobody")
    assert code == 1  # a voice with no entries: nothing done where something was named


@pytest.mark.piper
def test_purge_voice_through_the_engines_own_alias_with_piper(tmp_path) -> None:
    cache_dir = tmp_path / "cache"
    made = run_cli(cache_dir, "synth", "Doors closing.", "--voice", "joe", "--json",
                   engine="piper")
    assert made.returncode == 0, made.stderr
    key = json.loads(made.stdout)["key"]
    dry = run_cli(cache_dir, "purge", "--voice", "joe", "--dry-run", "--json", engine="piper")
    report = json.loads(dry.stdout)
    assert report["voice"]["canonical"] == "en_US-joe-medium"
    assert [e["key"] for e in report["entries"]] == [key] and report["deleted"] == 0
    assert (cache_dir / "objects" / key[:2] / key[2:4] / f"{key}.wav").exists()
    done = run_cli(cache_dir, "purge", "--voice", "joe", "--json", engine="piper")
    assert json.loads(done.stdout)["deleted"] == 1
    assert not (cache_dir / "objects" / key[:2] / key[2:4] / f"{key}.wav").exists()


# -- gc ------------------------------------------------------------------------------------

def _gc_scenario(capsys, tmp_path: Path, name: str) -> tuple[Path, Path, list[Path]]:
    """Three entries and a config capping the cache at two (gc evicts down to 90% of a cap,
    so two go); a file stored under the wrong key and a dead writer's temp file (the
    start-up check or gc's own, whichever runs first, removes those two)."""
    cache_dir = tmp_path / name
    for text in ("Alpha.", "Bravo.", "Charlie."):
        cli_json(capsys, cache_dir, "synth", text)
    some = next((cache_dir / "objects").rglob("*.wav"))
    impostor = some.parent / ("f" * 64 + ".wav")  # a valid file, but not this key's
    impostor.write_bytes(some.read_bytes())
    temp = some.parent / ".tmp-999999999-deadbeef"
    temp.write_bytes(b"half a take")
    config = tmp_path / f"{name}.toml"
    config.write_text("disk_max_entries = 2\n")
    return cache_dir, config, [impostor, temp]


def test_gc_prints_a_summary_for_people_and_json_for_scripts(capsys, tmp_path) -> None:
    cache_dir, config, planted = _gc_scenario(capsys, tmp_path, "human")
    code, out, _ = cli(capsys, cache_dir, "gc", config=config)
    assert code == 0
    assert "{'" not in out and "':" not in out  # not a Python dict
    lines = out.splitlines()
    assert re.match(r"gc index checked against the files: \d+ rows added, \d+ rows "
                    r"dropped, \d+ files quarantined, \d+ temp files removed", lines[0])
    assert lines[1] == ("gc evicted 2: 0 expired, 0 over the byte cap, 2 over the entry cap")
    size = r"\d+(\.\d)? (B|KiB|MiB|GiB)"  # for people: 1.2 MiB, not 1258291
    assert re.fullmatch(rf"gc now stored: 1 entries, {size} \(caps: {size}, 2 entries\)",
                        lines[2]), lines[2]
    assert not any(p.exists() for p in planted)

    cache_dir, config, planted = _gc_scenario(capsys, tmp_path, "script")
    report = cli_json(capsys, cache_dir, "gc", config=config)
    assert set(report["index"]) >= {"added", "dropped", "quarantined", "temp_removed"}
    assert report["evicted"] == {"expired": 0, "size": 0, "count": 2}
    assert report["entries"] == 1 and len(stored_files(cache_dir)) == 1
    assert not any(p.exists() for p in planted)


# -- every command's --json ----------------------------------------------------------------

def test_every_command_prints_one_json_document(capsys, cache_dir) -> None:
    old = Cache(cache_dir)
    CachedEngine(ToneEngine(model_revision="tone-0"), old).synthesize(
        SynthesisRequest("Old take."))
    old.close()
    documents = {}
    synth = cli_json(capsys, cache_dir, "synth", "Hello. Goodbye.")
    short = synth["key"][:8]
    for name, args in {
        "synth": ["synth", "Hello. Goodbye."],
        "explain": ["explain", "Hello. Goodbye."],
        "explain --key": ["explain", "--key", short],
        "stats": ["stats"],
        "stats --top-misses": ["stats", "--top-misses", "3"],
        "ls": ["ls"],
        "pin": ["pin", short],
        "unpin": ["unpin", short],
        "purge --dry-run": ["purge", "--all", "--dry-run"],
        "gc": ["gc"],
        "rerender": ["rerender", "--from-revision", "tone-0"],
        "purge": ["purge", "--key", short],
    }.items():
        documents[name] = cli_json(capsys, cache_dir, *args)
    assert documents["synth"]["cache"] == "hit"
    assert documents["pin"]["pinned"] is True and documents["unpin"]["pinned"] is False
    assert documents["rerender"]["rendered"] == 1
    assert documents["purge"]["deleted"] == 1
    phrases = cache_dir.parent / "phrases.json"
    phrases.write_text(json.dumps(["Warm me.", {"text": "Me too.", "pin": True}]))
    warm = run_cli(cache_dir, "warm", str(phrases), "--json")
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout)["rendered"] == 2  # the whole of stdout, no progress bar

    code, out, err = cli(capsys, cache_dir, "pin", "0000", "--json")
    assert code == 1 and "0000" in err
    assert json.loads(out) == {"error": {"message": err.split("error: ", 1)[1].strip(),
                                         "exit_code": 1}}


def test_help_states_the_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "exit codes" in out
    assert all(re.search(rf"^\s+{code}\s+\S", out, re.MULTILINE) for code in (0, 1, 2))


# -- rerender ------------------------------------------------------------------------------

def test_rerender_from_an_unknown_revision_fails_naming_the_known_ones(capsys,
                                                                       cache_dir) -> None:
    cache = Cache(cache_dir)
    old = CachedEngine(ToneEngine(model_revision="tone-0"), cache)
    old.synthesize(SynthesisRequest("Gate one is open."))
    old.usage.flush()
    cache.close()
    cli_json(capsys, cache_dir, "synth", "Something current.")
    before = stored_files(cache_dir)

    code, out, err = cli(capsys, cache_dir, "rerender", "--from-revision", "tone-O")
    assert code == 1
    assert "'tone-O'" in err and "tone-0:" in err and "tone-1 (current)" in err
    assert stored_files(cache_dir) == before  # a typo renders nothing

    summary = cli_json(capsys, cache_dir, "rerender", "--from-revision", "tone-0")
    assert summary["rendered"] == 1
    code, out, _ = cli(capsys, cache_dir, "rerender", "--from-revision", "tone-1")
    assert code == 0 and "current revision" in out


# -- warm ----------------------------------------------------------------------------------

class _Polyglot(Engine):
    """Languages only (the rule under test needs nothing else)."""

    id = "polyglot"
    languages = ("en-us", "en-gb", "fr", "zh")
    default_language = "en-us"


@pytest.mark.parametrize("engine", [ToneEngine(), _Polyglot()], ids=["tone", "polyglot"])
def test_warm_skips_exactly_the_languages_the_resolver_refuses(engine: Engine) -> None:
    from voxcache.cli.warm import speaks

    for language in (None, "", "en", "EN", "en_US", " en-us ", "en-GB", "zh", "ZH", "fr",
                     "fr-ca", "de", "tlh", "zh-cn", "-"):
        try:
            resolve(SynthesisRequest("a", language=language), engine)
            accepted = True
        except UnsupportedFeature:
            accepted = False
        assert speaks(engine.languages, language) is accepted, language


def test_warm_counts_unspoken_languages_and_fails_only_on_real_failures(tmp_path) -> None:
    phrases = tmp_path / "phrases.json"
    phrases.write_text(json.dumps({"phrases": [
        {"text": "Welcome."}, {"text": "Bienvenue.", "language": "fr"},
        {"text": "Qapla'.", "language": "tlh"}, {"text": "Au revoir.", "language": "fr"}]}))
    result = run_cli(tmp_path / "cache", "warm", str(phrases), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["rendered"], summary["skipped"], summary["failed"]) == (1, 3, [])
    assert summary["skipped_languages"] == {"fr": 2, "tlh": 1}
    assert "skipped 3 phrase(s)" in result.stderr and "fr (2)" in result.stderr

    phrases.write_text(json.dumps([{"text": "Welcome."}, {"text": "Hi.", "voice": "nobody"},
                                   {"text": "Salut.", "language": "fr"}]))
    result = run_cli(tmp_path / "cache", "warm", str(phrases), "--json")
    summary = json.loads(result.stdout)
    assert result.returncode == 1  # a phrase the engine could render failed
    assert (summary["cached"], summary["skipped"]) == (1, 1)
    assert "nobody" in summary["failed"][0]["error"]


@pytest.mark.piper
def test_warm_the_shipped_hot_phrases_with_piper_exits_0(tmp_path) -> None:
    """All 25 lines of the real file, rendered by real Piper (about 5 s on 2 cores)."""
    listed = json.loads(HOT_PHRASES.read_text())["phrases"]
    chinese = sum(1 for p in listed if p.get("language") == "zh")
    result = run_cli(tmp_path / "cache", "warm", str(HOT_PHRASES), "--json", engine="piper")
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(result.stdout)
    assert summary["failed"] == []
    assert summary["skipped_languages"] == {"zh": chinese} and chinese > 0
    assert summary["rendered"] == len(listed) - chinese
    assert summary["pinned"] == sum(1 for p in listed if p.get("pin") and
                                    p.get("language") != "zh")
    assert f"zh ({chinese})" in result.stderr and "en-us" in result.stderr
    again = run_cli(tmp_path / "cache", "warm", str(HOT_PHRASES), engine="piper")
    assert again.returncode == 0
    assert f"already cached {len(listed) - chinese}" in again.stdout
