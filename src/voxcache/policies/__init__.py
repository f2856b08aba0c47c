"""Policies: what a request gets, decided behind the narrow ``pipeline.Pipeline`` interface.

- ``seeds``: unseeded requests under ``pin``, ``bypass`` or ``variants:N``;
- ``segments``: a paragraph served from the sentences the cache has heard;
- ``upgrades``: old takes across a model revision (strict or stale-while-revalidate);
- ``usage``: what is asked and missed, to steer warming.

They depend on the pipeline protocol, never on the orchestrator (``voxcache.cached``),
which imports them.
"""
