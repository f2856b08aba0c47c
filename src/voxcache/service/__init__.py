"""The HTTP service (``voxcache serve``): the only package that imports FastAPI/Starlette.

Read a request top-down: ``speech`` (routes) → ``serving`` (tiers, flights,
admission) → ``CachedEngine`` → engine; ``respond`` turns the take into bytes.
"""

from .app import create_app

__all__ = ["create_app"]
