"""What a route needs from the app: the orchestrator, its pools, the metrics, the limits.

It decides nothing. Every decision about a request — tiers, seed and model
policies, segments, single flight, render slots, streaming — belongs to the
core orchestrator (``voxcache.cached.CachedEngine.take``); a route translates its
protocol into a ``SynthesisRequest``, asks ``Server.take`` and turns the ``Take``
back into its protocol's answer.
"""

from __future__ import annotations

from ..cached import MODES, CachedEngine
from ..entry import Entry
from ..outcome import Take
from ..request import SynthesisRequest
from ..resolved import ResolvedRequest
from ..scheduling import Admission
from .metrics import Metrics

__all__ = ["MODES", "Server", "Take"]


class Server:
    """One engine behind the cache, with the pools, counters and limits of a server."""

    def __init__(self, cached: CachedEngine, admission: Admission, metrics: Metrics,
                 timeout: float, multi_tenant: bool = False) -> None:
        self.cached = cached
        self.cache = cached.cache
        self.admission = admission
        self.metrics = metrics
        self.timeout = timeout
        """Longest wait for a take (or for each next chunk of a streamed one)."""
        self.multi_tenant = multi_tenant
        """API keys are configured: stored takes are tenant-checked through the index."""
        cached.attach(admission, metrics)

    async def resolve(self, request: SynthesisRequest) -> tuple[ResolvedRequest, str]:
        """Canonicalise and key a request (a reference clip is decoded off the loop)."""
        return await self.cached.aresolve_and_key(request)

    async def take(self, resolved: ResolvedRequest, key: str, mode: str = "use",
                   stream: bool = False, request: SynthesisRequest | None = None) -> Take:
        """The orchestrator's take of an already resolved request."""
        assert request is not None
        return await self.cached.take(request, mode=mode, stream=stream, timeout=self.timeout,
                                      resolved=(resolved, key))

    async def stored(self, key: str, tenant: str) -> tuple[Entry, str] | None:
        """A stored take by key, only if ``tenant`` owns it (``Cache.get_owned``: another
        tenant's key costs what an absent one costs and counts nothing for its owner).
        The owner's memory hit stays on the loop; everything else runs in the I/O pool."""
        check_index = self.multi_tenant
        held = self.cache.in_process.peek(key)
        if held is not None and held.header.meta.get("tenant", "default") == tenant:
            return self.cache.get_owned(key, tenant, check_index=check_index)
        return await self.admission.read(
            lambda: self.cache.get_owned(key, tenant, check_index=check_index))
