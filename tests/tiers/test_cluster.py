"""The Redis tier on a real Redis Cluster: a slot moving between masters under it (ASK while
it migrates, MOVED after), a master killed and its replica promoted, and a cluster that is
not up yet when the tier is made — all with the same tier object, no restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from redis import Redis

from voxcache.errors import TierUnavailable
from voxcache.testing.servers import RedisClusterServers, redis_available
from voxcache.testing.tier_contract import make_audio_entry, make_blob_entry
from voxcache.tiers.redis import RedisTier

pytestmark = pytest.mark.skipif(not redis_available(), reason="needs redis-server")


def test_a_slot_migrating_under_the_tier_is_followed(redis_cluster: RedisClusterServers,
                                                     prefix: str):
    tier = RedisTier.from_url(redis_cluster.url, prefix=prefix)
    audio, encoded = make_audio_entry(1), make_blob_entry(1)  # one key: one slot
    assert tier.put(audio) and tier.put(encoded)
    audio_name = tier.keys.entry(audio.header.key, "audio")
    encoded_name = tier.keys.entry(audio.header.key, "encoded")
    slot = redis_cluster.nodes[0].cli("CLUSTER", "KEYSLOT", audio_name).strip()
    source = redis_cluster.node_for(audio_name)
    target = next(node for node in redis_cluster.nodes if node is not source)
    source_id, target_id = (n.cli("CLUSTER", "MYID").strip() for n in (source, target))

    target.cli("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    source.cli("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    source.cli("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", audio_name)
    # Mid-migration: the moved value is reached through ASK, the other still at the source.
    assert tier.get(audio.header.key).blob == audio.blob
    assert tier.get(audio.header.key, "encoded").blob == encoded.blob
    late = make_blob_entry(1, size=10)
    assert tier.delete(late.header.key, "encoded") and tier.put(late)  # writes during it

    source.cli("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS",
               encoded_name)
    for node in redis_cluster.nodes:
        node.cli("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    redis_cluster.wait_ok()
    # After it: the tier's slot map is out of date, MOVED takes it to the new owner.
    assert redis_cluster.node_for(audio_name) is target
    assert tier.get(audio.header.key).blob == audio.blob
    assert tier.get(audio.header.key, "encoded").blob == late.blob
    tier.close()


@pytest.fixture(scope="module")
def replicated_cluster(tmp_path_factory: pytest.TempPathFactory):
    """Three masters with a replica each (node timeout 1 s, so a failover takes ~2 s)."""
    with RedisClusterServers(tmp_path_factory.mktemp("replicated"), masters=3,
                             replicas=1) as cluster:
        yield cluster


def _replica_of(cluster: RedisClusterServers, master_port: int):
    for node in cluster.nodes:
        if node.running and f"master_port:{master_port}" in node.cli("INFO", "replication"):
            return node
    raise LookupError(f"no replica of {master_port}")


def _wait_replicated(port: int, name: str, value: bytes) -> None:
    replica = Redis(port=port)
    replica.execute_command("READONLY")
    deadline = time.monotonic() + 10
    while replica.get(name) != value:
        assert time.monotonic() < deadline, "the replica never received the entry"
        time.sleep(0.05)
    replica.close()


def _serves(cluster: RedisClusterServers, name: str, node) -> bool:
    try:
        return cluster.node_for(name) is node
    except LookupError:
        return False


def test_a_master_killed_and_its_replica_promoted(replicated_cluster: RedisClusterServers,
                                                  prefix: str):
    tier = RedisTier.from_url(replicated_cluster.url, prefix=prefix, timeout=0.5,
                              connect_timeout=0.3)
    entry = make_audio_entry(2)
    assert tier.put(entry)
    name = tier.keys.entry(entry.header.key, "audio")
    master = replicated_cluster.node_for(name)
    replica = _replica_of(replicated_cluster, master.port)
    _wait_replicated(replica.port, name, entry.blob)

    master.kill()
    failures, deadline = 0, time.monotonic() + 30
    while True:
        try:
            found = tier.get(entry.header.key)
        except TierUnavailable:
            found = None
            failures += 1
        if found is not None:
            break
        assert time.monotonic() < deadline, "the tier never reached the promoted replica"
        time.sleep(0.1)
    assert found.blob == entry.blob
    while not _serves(replicated_cluster, name, replica):  # the news reaches every node
        assert time.monotonic() < deadline, "the replica was never promoted"
        time.sleep(0.1)
    assert failures >= 1  # the outage was seen (and was a TierUnavailable, i.e. a miss)
    after = make_audio_entry(3)
    assert tier.put(after) and tier.get(after.header.key).blob == after.blob
    tier.close()


def test_a_cluster_not_up_yet_is_used_once_it_is(tmp_path: Path):
    cluster = RedisClusterServers(tmp_path, masters=3)  # ports chosen, nothing started
    tier = RedisTier.from_url(cluster.url, connect_timeout=0.3)
    entry = make_audio_entry(4)
    started = time.monotonic()
    with pytest.raises(TierUnavailable):
        tier.get(entry.header.key)
    assert time.monotonic() - started < 5.0
    assert tier.health().state == "down"
    with cluster:
        assert tier.put(entry)
        assert tier.get(entry.header.key).blob == entry.blob
        assert tier.health().state == "ok"
        tier.close()


def _marked_failed(node, port: int) -> bool:
    for line in node.cli("CLUSTER", "NODES").splitlines():
        fields = line.split()
        if f":{port}@" in fields[1]:
            return "fail" in fields[2].split(",")
    return False


def test_a_lost_shard_leaves_the_other_shards_serving(tmp_path: Path, prefix: str):
    """Three masters, no replicas, ``cluster-require-full-coverage no``
    (docs/operating/cluster.md): one master killed costs its own slots only."""
    with RedisClusterServers(tmp_path, masters=3,
                             extra=("--cluster-require-full-coverage", "no")) as cluster:
        tier = RedisTier.from_url(cluster.url, prefix=prefix, timeout=0.3,
                                  connect_timeout=0.2)
        entries = [make_audio_entry(100 + i) for i in range(24)]
        owner = {}
        for entry in entries:
            assert tier.put(entry)
            owner[entry.header.key] = cluster.node_for(tier.keys.entry(entry.header.key,
                                                                       "audio"))
        lost = owner[entries[0].header.key]
        lost.kill()
        survivors = [node for node in cluster.nodes if node is not lost]
        for node in survivors:  # wait until the others have marked it failed (not "fail?")
            deadline = time.monotonic() + 15
            while not _marked_failed(node, lost.port):
                assert time.monotonic() < deadline, "the master was never marked failed"
                time.sleep(0.1)
        served, missed = 0, 0
        for entry in entries:
            try:
                found = tier.get(entry.header.key)
            except TierUnavailable:
                found = None
            if owner[entry.header.key] is lost:
                missed += found is None
            else:
                assert found is not None and found.blob == entry.blob
                served += 1
        assert missed == sum(node is lost for node in owner.values()) >= 1
        assert served >= 1
        tier.close()


def test_delete_of_every_kind_finds_them_on_their_node(redis_cluster: RedisClusterServers,
                                                       prefix: str):
    tier = RedisTier.from_url(redis_cluster.url, prefix=prefix)
    audio, encoded = make_audio_entry(5), make_blob_entry(5)
    assert tier.put(audio) and tier.put(encoded)
    assert tier.delete(audio.header.key, None) is True  # a SCAN over every master
    assert tier.get(audio.header.key) is None
    assert tier.get(audio.header.key, "encoded") is None
    assert tier.delete(audio.header.key, None) is False
    tier.close()
