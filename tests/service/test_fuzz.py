"""A schemathesis pass over the OpenAPI schema: whatever it sends, nothing answers 5xx.

Bounded (50 examples per operation) and run against the ASGI app with the tone
engine, so it stays within seconds. Overload (503) is excluded by a large queue;
every other 5xx is a bug. (Driven through hypothesis directly: schemathesis's
pytest plugin does not run under this pytest version.)
"""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings


def test_no_operation_answers_5xx(make_app) -> None:
    app, _ = make_app(render_queue=1000)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/audio/speech", "/v1/synthesize",
                                              "/v1/voices", "/v1/audio/{key}"}
    seen: dict[str, set[int]] = {}
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=50, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case) -> None:
            response = case.call()
            seen.setdefault(f"{case.method} {case.path}", set()).add(response.status_code)
            assert response.status_code < 500, (case.method, case.path, response.text[:300])
            if response.status_code >= 400 and response.status_code != 405:
                # a message, in the shape of the route's protocol (Piper's: Flask's HTML page)
                if "<!doctype html>" in response.text[:20]:
                    assert case.path in ("/synthesize", "/info", "/voices")
                    assert "<title>" in response.text and "<p>" in response.text
                    return
                body = response.json()
                assert body.get("message") or body.get("detail") or body["error"]["message"]

        check()
    print("\nstatuses seen per operation:", {k: sorted(v) for k, v in sorted(seen.items())})
