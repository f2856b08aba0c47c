"""The S3 tier against moto's S3 server: objects a CDN can serve, verified reads, first writer
wins, expiry, and a store that is damaged, frozen, gone or lacks conditional writes."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import threading
import time

import boto3
import pytest
import soundfile
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from voxcache.entry import Entry
from voxcache.errors import TierUnavailable
from voxcache.testing.servers import MotoS3Server
from voxcache.testing.tier_contract import make_audio_entry, make_blob_entry
from voxcache.tiers.s3 import S3Tier

from .conftest import flip_byte


@pytest.fixture
def tier(bucket: str):
    tier = S3Tier.from_url(f"s3://{bucket}/cache")
    yield tier
    tier.close()


def _object(server: MotoS3Server, tier: S3Tier, key: str, kind: str = "audio") -> dict:
    return server.client().get_object(Bucket=tier.bucket, Key=tier.object_name(key, kind))


def _absent(server: MotoS3Server, tier: S3Tier, key: str, kind: str = "audio") -> bool:
    listed = server.client().list_objects_v2(Bucket=tier.bucket,
                                             Prefix=tier.object_name(key, kind))
    return not listed.get("Contents")


def test_an_object_is_the_wav_file_a_cdn_can_serve(tier, s3_env):
    entry = make_audio_entry(1, ttl=3600)
    assert tier.put(entry)
    key = entry.header.key
    assert tier.object_name(key, "audio") == f"cache/objects/{key[:2]}/{key[2:4]}/{key}.wav"
    stored = _object(s3_env, tier, key)
    body = stored["Body"].read()
    assert body == entry.blob
    assert stored["ContentType"] == "audio/wav"
    assert float(stored["Metadata"]["vx-expires"]) == entry.header.expires
    assert stored["Expires"].timestamp() == pytest.approx(entry.header.expires, abs=1)
    samples, rate = soundfile.read(io.BytesIO(body), dtype="int16")  # a standard WAV
    assert rate == 16000 and samples.tobytes() == entry.audio().pcm


def test_a_flipped_byte_is_a_miss_counted_and_deleted(tier, s3_env):
    entry = make_audio_entry(2)
    tier.put(entry)
    client = s3_env.client()
    name = tier.object_name(entry.header.key, "audio")
    for at in (0, 5, 40, entry.payload_offset - 1, entry.payload_offset, entry.size - 1):
        client.put_object(Bucket=tier.bucket, Key=name, Body=flip_byte(entry.blob, at))
        assert tier.get(entry.header.key) is None, f"served a flip at byte {at}"
        assert _absent(s3_env, tier, entry.header.key), f"kept the damaged object ({at})"
    assert tier.stats()["counts"]["corruptions"] == 6


def test_another_keys_object_under_this_name_is_refused_and_deleted(tier, s3_env):
    mine, other = make_audio_entry(3), make_audio_entry(4)
    s3_env.client().put_object(Bucket=tier.bucket, Key=tier.object_name(mine.header.key,
                                                                         "audio"),
                               Body=other.blob)
    assert tier.get(mine.header.key) is None
    assert _absent(s3_env, tier, mine.header.key)
    assert tier.stats()["counts"]["corruptions"] == 1


def test_the_first_writer_wins(tier, s3_env):
    first, second = make_audio_entry(5), make_audio_entry(5)
    assert first.blob != second.blob
    assert tier.put(first) and tier.put(second)
    assert _object(s3_env, tier, first.header.key)["Body"].read() == first.blob


def test_simultaneous_writers_leave_one_verified_take(tier, s3_env):
    takes = [make_audio_entry(6, frames=50_000) for _ in range(8)]
    results: list[Entry | None] = []
    threads = [threading.Thread(target=lambda t=t: results.append(tier.put(t)))
               for t in takes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(result is not None for result in results)
    stored = _object(s3_env, tier, takes[0].header.key)["Body"].read()
    assert stored in {take.blob for take in takes}
    assert {result.blob for result in results} == {stored}  # every writer learns the winner
    assert tier.get(takes[0].header.key).blob == stored


def test_of_two_racing_conditional_writes_one_succeeds_as_on_s3(bucket, s3_env):
    """The test S3 server keeps S3's promise that first-writer-wins stands on: of two
    ``If-None-Match: *`` writes of one name, one succeeds. moto checks, then writes: a small
    write arriving while a large one was being stored succeeded too (6 trials of 6), so two
    nodes could each believe their take was the published one. The small write starts later
    each trial, until the large one wins alone twice."""
    client = s3_env.client()  # boto3 clients are thread-safe: both writers share it
    alone = 0
    for step in range(60):
        key, won, done = f"race/{step}", [], threading.Event()

        def large(key: str = key, won: list[str] = won, done: threading.Event = done) -> None:
            with contextlib.suppress(ClientError):
                client.put_object(Bucket=bucket, Key=key, Body=b"L" * 16_000_000,
                                  IfNoneMatch="*")
                won.append("large")
            done.set()

        def small(key: str = key, won: list[str] = won, done: threading.Event = done) -> None:
            while not done.is_set():
                try:
                    client.put_object(Bucket=bucket, Key=key, Body=b"s", IfNoneMatch="*")
                except ClientError:
                    time.sleep(0.002)
                else:
                    won.append("small")
                    return

        writers = [threading.Thread(target=large), threading.Thread(target=small)]
        writers[0].start()
        time.sleep(0.01 * step)
        writers[1].start()
        for writer in writers:
            writer.join()
        client.delete_object(Bucket=bucket, Key=key)
        assert len(won) == 1, f"both writes of one name succeeded (small one {step * 10} ms late)"
        alone = alone + 1 if won == ["large"] else 0
        if alone == 2:
            return
    pytest.fail("the large write never won alone: the race was not reached")


def test_an_expired_object_gives_way_to_a_new_take(tier, s3_env):
    old = make_audio_entry(7, ttl=0.3)
    assert tier.put(old)
    time.sleep(0.4)
    assert tier.get(old.header.key) is None
    fresh = make_audio_entry(7)
    assert tier.put(fresh)
    assert tier.stats()["counts"]["replaced"] == 1
    assert _object(s3_env, tier, fresh.header.key)["Body"].read() == fresh.blob


def test_expiry_in_the_metadata_is_checked_before_the_body_is_read(tier, s3_env):
    entry = make_audio_entry(8)  # the envelope itself never expires
    s3_env.client().put_object(Bucket=tier.bucket, Key=tier.object_name(entry.header.key,
                                                                        "audio"),
                               Body=entry.blob, Metadata={"vx-expires": repr(time.time() - 1)})
    assert tier.get(entry.header.key) is None
    assert tier.contains(entry.header.key) is False
    assert tier.stats()["counts"]["expired"] == 1
    assert not _absent(s3_env, tier, entry.header.key)  # expiry is not damage: GC removes it


def test_an_oversized_object_is_not_read(bucket, s3_env):
    tier = S3Tier.from_url(f"s3://{bucket}/cache", max_object_size=1000)
    entry = make_audio_entry(9)  # ~4 KB
    assert tier.put(entry)
    assert tier.get(entry.header.key) is None
    assert tier.stats()["counts"]["corruptions"] == 1
    assert _absent(s3_env, tier, entry.header.key)


def test_delete_of_every_kind(tier, s3_env):
    audio, encoded = make_audio_entry(10), make_blob_entry(10)
    tier.put(audio)
    tier.put(encoded)
    assert tier.delete(audio.header.key, None) is True
    assert _absent(s3_env, tier, audio.header.key)
    assert _absent(s3_env, tier, audio.header.key, "encoded")
    assert tier.delete(audio.header.key, None) is False


def _counting_client(sent: list[str]):
    client = boto3.session.Session().client("s3")
    client.meta.events.register("before-send.s3", lambda request, **_: sent.append(
        request.method))
    return client


def test_names_voxcache_never_makes_are_refused_without_a_request(bucket, s3_env):
    sent: list[str] = []
    tier = S3Tier(bucket, "cache", client=_counting_client(sent))
    bad = make_audio_entry(11)
    for key, kind in (("../../etc/passwd", "audio"), ("0" * 63, "audio"),
                      (bad.header.key, "../x")):
        assert tier.get(key, kind) is None
        assert tier.contains(key, kind) is False
        assert tier.delete(key, kind) is False
    assert sent == []
    assert tier.stats()["counts"]["refused_names"] == 3


def test_a_store_without_conditional_writes_falls_back_to_head_then_put(bucket, s3_env):
    """Some S3-compatible stores answer 501 to If-None-Match/If-Match on PutObject; the tier
    then writes head-then-put. The 501 here is that store's answer, given by a botocore
    hook; every other request goes to the S3 server."""
    client = boto3.session.Session().client("s3")
    refused: list[str] = []

    def no_conditions(request, **_):
        if request.method == "PUT" and ("If-None-Match" in request.headers
                                         or "If-Match" in request.headers):
            refused.append(request.url)
            return AWSResponse(request.url, 501, {}, _Raw(
                b"<Error><Code>NotImplemented</Code><Message>A header you provided "
                b"implies functionality that is not implemented</Message></Error>"))
        return None

    client.meta.events.register("before-send.s3.PutObject", no_conditions)
    tier = S3Tier(bucket, "cache", client=client)
    first, second = make_audio_entry(12, ttl=0.3), make_audio_entry(12)
    assert tier.put(first)
    assert tier.stats()["conditional_writes"] is False
    assert len(refused) == 1  # asked once, then never again
    assert tier.put(second)  # a live first take: kept
    assert tier.get(first.header.key).blob == first.blob
    time.sleep(0.4)
    assert tier.put(second)  # expired: replaced without If-Match
    assert tier.get(second.header.key).blob == second.blob
    assert len(refused) == 1


class _Raw(io.BytesIO):
    def stream(self, **_):
        yield self.getvalue()


def test_health_says_what_is_wrong(s3_env, bucket):
    assert S3Tier.from_url(f"s3://{bucket}").health().state == "ok"
    missing = S3Tier.from_url("s3://no-such-bucket-here/x").health()
    assert missing.state == "down" and "no-such-bucket-here" in missing.detail
    assert "AWS_ENDPOINT_URL" in missing.detail


def test_a_frozen_store_answers_within_the_bound(fresh_s3):
    """SIGSTOP on the S3 server: a read gives up after attempts × (connect_timeout +
    timeout) = 1 × (0.3 + 0.5) = 0.8 s."""
    fresh_s3.create_bucket("frozen")
    tier = S3Tier.from_url("s3://frozen/x", timeout=0.5, connect_timeout=0.3, attempts=1)
    entry = make_audio_entry(13)
    assert tier.put(entry)
    assert fresh_s3.process is not None
    os.kill(fresh_s3.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(TierUnavailable, match="timeout"):
            tier.get(entry.header.key)
        assert time.monotonic() - started < 3.0  # the bound is 0.8 s; generous margin
    finally:
        os.kill(fresh_s3.process.pid, signal.SIGCONT)
    assert tier.get(entry.header.key).blob == entry.blob
    tier.close()


def test_a_killed_store_raises_quickly_and_is_used_again_after_a_restart(fresh_s3):
    fresh_s3.create_bucket("phoenix")
    tier = S3Tier.from_url("s3://phoenix/x")
    entry = make_audio_entry(14)
    assert tier.put(entry)
    fresh_s3.kill()
    started = time.monotonic()
    with pytest.raises(TierUnavailable):
        tier.get(entry.header.key)
    with pytest.raises(TierUnavailable):
        tier.put(entry)
    assert time.monotonic() - started < 5.0  # refused: two attempts, ≤ 1 s back-off each
    assert tier.health().state == "down"
    fresh_s3.start()
    fresh_s3.create_bucket("phoenix")  # moto keeps nothing across a restart
    assert tier.get(entry.header.key) is None
    assert tier.put(entry)
    assert tier.get(entry.header.key).blob == entry.blob
    assert tier.health().state == "ok"
    tier.close()
