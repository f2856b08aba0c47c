"""One package per protocol voxcache speaks and fronts: its fields and their mapping, its upstream
client (and switches), the stage adapter for its embedded engine and its ``route`` module live
together (``gpt_sovits``, ``cosyvoice``, ``piper``, ``openai``).

Shared pieces stay where they were: transport, HTTP, health, centre, decoding and revisions in
``voxcache.upstream`` (with the upstream-kind registry ``UPSTREAMS``), the stage cache in
``voxcache.stages``, the route helpers in ``voxcache.service.routes.compat``. A protocol sits
below the service, except its ``route`` module: that belongs to the service (it alone may import
FastAPI, the service and the runtime; pyproject's import contracts hold both).
"""
