"""The storing gate and the savings ledger across two nodes on a real Redis and S3 (moto)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from voxcache.testing import forked
from voxcache.testing.servers import clean_env

from .conftest import needs_redis, new_bucket, new_prefix, nodes, raw_redis, until

pytestmark = pytest.mark.slow
CONFIG = """
[admission]
never_store = ["email", "url", "phone", "money", "date", "time", "code", "re:(?i)okafor",
               "numbers", "digits"]
admit_after = 2
caller = "header:X-Session"
[savings]
price_per_million_chars = 15.0
"""
PRIVATE = "Your order 90417 ships to li.wei@example.com today."
EVERY_CLASS = {
    "numbers": "Order number forty-seven, please come to the counter.",
    "url": "Track it at https://track.example.com/zq please.",
    "phone": "Call us back on 020 7946 0958.",
    "money": "Your balance is three hundred euros.",
    "date": "Your visit is on the second of December.",
    "time": "Your table is ready at half past seven.",
    "code": "Your pickup code is Q X 7 B.",
    "pattern": "Your table is ready, Mr Okafor.",
    "digits": "您的取件码是５８３９２。",
}


def _everything_in_redis(url: str) -> bytes:
    client = raw_redis(url)
    dump = b""
    for name in client.scan_iter(count=1000):
        dump += name
        kind = client.type(name)
        if kind == b"string":
            dump += client.get(name) or b""
        elif kind == b"hash":
            dump += b"".join(k + v for k, v in client.hgetall(name).items())
        elif kind == b"set":
            dump += b"".join(client.smembers(name))
    return dump


def _everything_in_s3(s3, bucket: str) -> bytes:
    client = s3.client()
    dump = b""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            dump += item["Key"].encode()
            dump += client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return dump


def test_two_nodes_keep_nothing_count_callers_together_and_add_up_savings(
        tmp_path: Path, redis_server, s3_server) -> None:
    needs_redis()
    prefix, bucket = new_prefix(), new_bucket(s3_server)
    redis_url = f"{redis_server.url}?prefix={prefix}"
    tiers = ["memory", "disk", redis_url, f"s3://{bucket}/p"]
    with nodes(tmp_path, tiers, count=2, env=s3_server.env, extra_config=CONFIG) as (a, b):
        refused = [node.speak(PRIVATE) for node in (a, b)]
        assert [r.headers["x-cache"] for r in refused] == ["BYPASS", "BYPASS"]
        assert {r.headers["x-cache-reason"] for r in refused} == {"admission:email"}
        key = refused[0].headers["x-cache-key"]
        for cls, words in EVERY_CLASS.items():
            answer = (a, b)[len(words) % 2].speak(words)
            assert answer.headers["x-cache-reason"] == f"admission:{cls}", cls
        # admit_after = 2: one session on node A, another on node B
        text = "Thank you for calling."
        first = a.speak(text).headers  # no session: counts as no caller
        one = a.post("/v1/audio/speech", json={"input": text, "response_format": "wav"},
                     headers={"X-Session": "session-alpha-1"}).headers
        two = b.post("/v1/audio/speech", json={"input": text, "response_format": "wav"},
                     headers={"X-Session": "session-bravo-2"}).headers
        assert (first["x-cache"], one["x-cache"], two["x-cache"]) == ("BYPASS", "BYPASS", "MISS")
        assert until(lambda: a.speak(text).headers["x-cache"] == "HIT", what="A hits")
        for _ in range(2):
            assert b.speak(text).headers["x-cache"] == "HIT"
        redis_dump = _everything_in_redis(redis_url)
        s3_dump = _everything_in_s3(s3_server, bucket)
    needles = [PRIVATE, "90417", "li.wei", key, "session-alpha-1", "session-bravo-2",
               *EVERY_CLASS.values(), "forty-seven", "0958", "track.example", "Okafor",
               "５８３９２", "Q X 7 B"]
    for needle in needles:
        assert needle.encode() not in redis_dump, needle
        assert needle.encode() not in s3_dump, needle
    for node in (a, b):
        for path in node.cache_dir.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                for needle in needles:
                    assert needle.encode() not in data, (path, needle)
        assert not [needle for needle in needles if needle in node.log()]
    # the ledger: 1 hit on A, 2 on B; each node's report shows the fleet's 3
    config = tmp_path / "ledger.toml"
    listed = ", ".join(f'"{tier}"' for tier in tiers)
    config.write_text(f"tiers = [{listed}]\n{CONFIG}")
    reports = []
    clean = clean_env()
    for node in (a, b):
        out = forked.run([sys.executable, "-m", "voxcache", "--cache-dir",
                          str(node.cache_dir), "--config", str(config), "stats",
                          "--savings", "--json"], capture_output=True, text=True,
                         timeout=120, env={**clean, **s3_server.env})
        assert out.returncode == 0, out.stderr
        reports.append(json.loads(out.stdout))
    for report in reports:
        assert report["fleet"] is True
        assert report["total"]["hits"] == 3
        assert report["total"]["chars"] == 3 * len(text)
        assert report["total"]["money"] == pytest.approx(3 * len(text) / 1e6 * 15.0)
