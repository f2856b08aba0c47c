"""A schemathesis pass over the protocol routes that create_app mounts: no 5xx."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings

from voxcache import Cache, CachedEngine
from voxcache.config import Settings
from voxcache.engines.tone import ToneEngine
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions

PATHS = {"/tts", "/inference_sft", "/inference_zero_shot", "/inference_cross_lingual",
         "/inference_instruct", "/inference_instruct2"}


def test_protocol_routes_never_answer_5xx(tmp_path) -> None:
    config = Settings(cache_dir=tmp_path / "cache", engine="tone")
    cache = Cache(config.cache_dir, config.cache_config())
    app = create_app(config, options=ServiceOptions(render_queue=1000),
                     cached=CachedEngine(ToneEngine(), cache))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [r.ok() for r in schema.get_all_operations() if r.ok().path in PATHS]
    assert {op.path for op in operations} == PATHS
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=40, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            response = case.call()
            assert response.status_code < 500, (case.method, case.path, response.text[:300])
            if response.status_code >= 400:  # a message, in the shape of the imitated server
                body = response.json()
                assert body.get("message") or body.get("detail") or body["error"]["message"]

        check()
    cache.close()
