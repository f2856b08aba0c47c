"""``voxcache warm --server URL``: warm through a running service, behind its listeners.

Each phrase is one ``POST /v1/synthesize`` with ``X-Voxcache-Priority:
background``, so the service queues these renders after every interactive one;
``X-Cache: HIT`` means the phrase was already stored. A 503 (the service is
full) is retried after its ``Retry-After``, a bounded number of times; any other
refusal is reported for that phrase and the list goes on. The service's
``/v1/engine`` says which languages it speaks, so lines in other languages are
skipped before they are sent, exactly as a direct warm skips them.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

RETRIES_WHEN_FULL = 5


class RemoteWarmer:
    """Warms phrases through a service's native API."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 600.0) -> None:
        headers = {"X-Voxcache-Priority": "background"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def languages(self) -> list[str] | None:
        """The languages the service's engine speaks (None if it does not say: then every
        phrase is sent, and the service's answer decides)."""
        try:
            answer = self.client.get("/v1/engine")
            languages = answer.json()["languages"] if answer.status_code == 200 else None
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(languages, list) or not all(isinstance(x, str) for x in languages):
            return None
        return languages

    def warm(self, phrase: dict[str, Any], pin_all: bool, summary: dict[str, Any]) -> None:
        """Render (or find) one phrase and pin it if asked; record the outcome."""
        body = {k: v for k, v in phrase.items() if k != "pin" and v is not None}
        try:
            answer = self._post(body)
            if answer.status_code != 200:
                raise RuntimeError(_message(answer))
            summary["cached" if answer.headers.get("x-cache") == "HIT" else "rendered"] += 1
            if pin_all or phrase.get("pin"):
                pinned = self.client.put(f"/v1/entries/{answer.headers['x-cache-key']}/pin")
                if pinned.status_code != 204:
                    raise RuntimeError(f"pin: {_message(pinned)}")
                summary["pinned"] += 1
        except (httpx.HTTPError, RuntimeError) as exc:
            summary["failed"].append({"text": str(phrase.get("text"))[:80], "error": str(exc)})

    def _post(self, body: dict[str, Any]) -> httpx.Response:
        for _ in range(RETRIES_WHEN_FULL):
            answer = self.client.post("/v1/synthesize", json=body)
            if answer.status_code != 503:
                return answer
            time.sleep(float(answer.headers.get("retry-after", "1")))
        return answer

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()


def _message(answer: httpx.Response) -> str:
    try:
        return f"{answer.status_code}: {answer.json()['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{answer.status_code}: {answer.text[:200]}"
