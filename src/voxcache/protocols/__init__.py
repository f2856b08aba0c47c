"""The wire protocols voxcache speaks and fronts, one folder each: a protocol's fields, its field
mapping, its upstream client (and switches), the stage adapter for its embedded engine and its
routes live together (``gpt_sovits``, ``cosyvoice``, ``piper``; ``openai`` separately).

Shared pieces stay where they are: the upstream transport, HTTP, health, centre, decoding and
revision code in ``voxcache.upstream`` (with the upstream-kind registry, ``UPSTREAMS``); the
stage cache in ``voxcache.stages``; the route helpers in ``voxcache.service.routes.compat``.
Protocols sit above the service (their routes use its guards): the service mounts their routers
by name (``service.app.PROTOCOL_ROUTERS``) and FastAPI is imported only by their ``routes``.
"""
