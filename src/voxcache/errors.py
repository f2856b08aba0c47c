"""Every error voxcache raises on purpose, in one tree.

``VoxcacheError`` ⊃ ``RequestError`` (HTTP 4xx: ``InvalidParameter``, ``UnknownVoice``,
``BadReferenceAudio``, ``UnsupportedFeature``, ``NotFound``), ``CacheDirError``,
``TierUnavailable``, ``EngineError`` (``MissingDependency`` ⊃ ``EngineLoadError``;
``UpstreamError``, HTTP 502) and ``Overloaded``. Foreign errors are translated into these at
the boundary. Messages say what happened, name the offending value, and say what to do.
"""

from __future__ import annotations


class VoxcacheError(Exception):
    """Base of every error voxcache raises deliberately."""


class RequestError(VoxcacheError):
    """The request cannot be served as sent; the caller must change it."""

    status = 400


class InvalidParameter(RequestError):
    """A parameter is unknown, of the wrong type, or out of range."""


class UnknownVoice(RequestError):
    """The named voice does not exist for this engine or tenant."""

    status = 404


class BadReferenceAudio(RequestError):
    """Reference audio could not be decoded, or holds no samples."""


class UnsupportedFeature(RequestError):
    """The configured engine cannot honour a field of the request."""


class NotFound(RequestError):
    """No such entry or voice (another tenant's ids look exactly like this)."""

    status = 404


class CacheDirError(VoxcacheError):
    """The cache folder cannot be created or written."""


class TierUnavailable(VoxcacheError):
    """A shared tier (Redis, S3) could not answer: unreachable, timed out, or refused the call.

    Internal to the tiers: ``TierStack`` turns it into a miss (or a skipped write) and
    counts it against the tier's breaker, so a caller never sees it.
    """


class EngineError(VoxcacheError):
    """The engine failed to render the request."""


class MissingDependency(EngineError):
    """An optional extra is needed for this feature but is not installed."""


class PluginLoadError(MissingDependency):
    """A plugin (an engine, a tier kind) failed to import, or names nothing usable."""


class EngineLoadError(PluginLoadError):
    """An engine could not be loaded: its plugin failed to import, or names no engine class."""


class UpstreamError(EngineError):
    """The upstream TTS server behind the gateway was unreachable or answered an error.

    ``upstream_status`` is the upstream's HTTP status (None when it could not be
    reached); the message carries the upstream's own error text. voxcache answers 502.
    """

    status = 502

    def __init__(self, message: str, upstream_status: int | None = None,
                 upstream_reply: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.upstream_status = upstream_status
        self.upstream_reply = upstream_reply or {}
        """The string fields of the upstream's JSON error body, scrubbed (``redact``), for a
        route that answers in the upstream's own shape (api_v2's ``message``/``Exception``)."""


class Overloaded(VoxcacheError):
    """Admission control refused a render: too many in flight or queued."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after
