"""Test servers' ports: below the kernel's ephemeral range, one slice per parallel worker.

A parallel CI run failed when a cluster node could not bind the port it had been handed
(38116, inside the ephemeral range): something else took it between the pick and the bind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from voxcache.testing import servers


def test_ports_and_bus_ports_stay_below_the_ephemeral_range():
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    ephemeral_low = int(text[0])
    low, high = servers.PORTS
    assert high + 10000 <= ephemeral_low  # a cluster node's bus port too


def test_parallel_workers_pick_from_disjoint_slices(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    slices = []
    for worker in ("gw0", "gw1", "gw2"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(servers.port_range())
        for _ in range(20):
            port = servers.free_port(with_bus=True)
            assert slices[-1][0] <= port < slices[-1][1]
    ranges = [set(range(*s)) for s in slices]
    assert not (ranges[0] & ranges[1]) and not (ranges[1] & ranges[2])
    assert min(s[0] for s in slices) >= servers.PORTS[0]
    assert max(s[1] for s in slices) <= servers.PORTS[1]


@pytest.mark.parametrize("env", [{}, {"PYTEST_XDIST_WORKER": "gw0",
                                      "PYTEST_XDIST_WORKER_COUNT": "1"}])
def test_one_process_uses_the_whole_range(monkeypatch, env):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert servers.port_range() == servers.PORTS
