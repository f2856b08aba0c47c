"""S3 tier: verified entries as plain objects in any S3-compatible store (AWS, MinIO, Ceph, R2).

Objects are the stored files under the disk tier's layout (an audio entry is a WAV a CDN can
serve); ``s3://bucket/prefix`` plus the standard AWS variables is the configuration. Every
read is verified against its key and kind; first writer wins (``If-None-Match: *``, an
expired object replaced with ``If-Match``; stores without conditional writes fall back to
head-then-put); expiry in the object's metadata; every call bounded. docs/operating/cluster.md.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from ..entry import CorruptEntry, Entry, decode
from ..errors import InvalidParameter, TierUnavailable
from .base import OK, TierHealth
from .faults import FaultLog
from .layout import suffix_of
from .remote import Counters, ObjectRef, blob_digest, valid_name

log = logging.getLogger("voxcache.s3")

DEFAULT_TIMEOUT = 2.0
DEFAULT_CONNECT_TIMEOUT = 0.5
DEFAULT_ATTEMPTS = 2
DEFAULT_MAX_OBJECT_SIZE = 64 * 1024 * 1024
CHUNK = 1024 * 1024
OPTIONS = {"timeout": float, "connect_timeout": float, "attempts": int,
           "max_object_size": int, "addressing_style": str, "region": str}
"""Query parameters voxcache reads from an S3 URL (any other is refused)."""
EXPIRES = "vx-expires"
DIGEST = "vx-xxh3"
KIND = "vx-kind"
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_TAKEN = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_UNSUPPORTED = {"NotImplemented", "501"}
_SESSION: Any = None
"""One boto3 session per process (as ``boto3.client`` uses): it loads the S3 service model
once, so a second tier's client is made in milliseconds instead of a third of a second."""
_SESSION_LOCK = threading.Lock()
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX = re.compile(r"(?:[A-Za-z0-9_.-]+/)*")


class S3Tier:
    """Entries as objects in one bucket, below one prefix."""

    name = "s3"
    durable = True

    def __init__(self, bucket: str, prefix: str = "", *, client: Any = None,
                 timeout: float = DEFAULT_TIMEOUT,
                 connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                 attempts: int = DEFAULT_ATTEMPTS,
                 max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
                 addressing_style: str | None = None, region: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if not _BUCKET.fullmatch(bucket):
            raise InvalidParameter(f"S3 bucket name {bucket!r} is not valid: 3-63 lower-case "
                                   "letters, digits, '.' and '-'")
        if not _PREFIX.fullmatch(prefix) or any(p in (".", "..") for p in prefix.split("/")):
            raise InvalidParameter(f"S3 prefix {prefix!r} is not allowed: use folder names of "
                                   "letters, digits and '_.-' separated by '/'")
        if addressing_style not in (None, "auto", "path", "virtual"):
            raise InvalidParameter(f"S3 addressing_style {addressing_style!r}: use path, "
                                   "virtual or auto")
        self.bucket = bucket
        self.prefix = prefix
        self.timeout = timeout
        self.max_object_size = max_object_size
        self._s3 = client if client is not None else _client(
            timeout, connect_timeout, attempts, addressing_style, region)
        self._conditional = True
        """False once the store answered 501 to a conditional write (then head-then-put)."""
        self._clock = clock
        self.counters = Counters()
        self.faults = FaultLog(log, self.counters.count)

    @classmethod
    def from_url(cls, url: str, **options: Any) -> S3Tier:
        """A tier for ``s3://bucket/prefix``; query parameters (or keyword options, which
        win) set ``timeout``, ``connect_timeout``, ``attempts``, ``max_object_size``,
        ``addressing_style`` (path for most MinIO set-ups) and ``region``."""
        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise InvalidParameter(f"S3 URL {url!r} must look like s3://bucket/prefix (the "
                                   "endpoint and keys come from AWS_ENDPOINT_URL, "
                                   "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
        settings = {name: _option(name, raw) for name, raw in
                    parse_qsl(parts.query, keep_blank_values=True)}
        settings.update({name: _option(name, value) for name, value in options.items()})
        return cls(parts.netloc, parts.path, **settings)

    def object_name(self, key: str, kind: str) -> str:
        """The object an entry is stored as (the disk layout below the prefix)."""
        return f"{self.prefix}objects/{key[:2]}/{key[2:4]}/{key}{suffix_of(kind)}"

    # -- reads ---------------------------------------------------------------------
    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """The verified, unexpired entry, or None (a bad object is deleted and counted)."""
        if not valid_name(key, kind):
            self.counters.count("refused_names")
            return None
        name = self.object_name(key, kind)
        blob = self._fetch(name)
        entry = None if blob is None else self._verified(name, blob, key, kind)
        self.counters.count("misses" if entry is None else "hits")
        return entry

    def _fetch(self, name: str) -> bytes | None:
        """The object's bytes; None when absent, expired by its metadata, or oversized."""
        with self._remote("read", name):
            try:
                response = self._s3.get_object(Bucket=self.bucket, Key=name)
            except ClientError as exc:
                if _code(exc) in _NOT_FOUND:
                    return None
                raise
            body = response["Body"]
            try:
                if self._expired(response.get("Metadata", {})):
                    self.counters.count("expired")
                    return None
                if response.get("ContentLength", 0) > self.max_object_size:
                    self._discard(name, "corruptions", "larger than max_object_size")
                    return None
                return self._read_body(body, name)
            finally:
                body.close()

    def _read_body(self, body: Any, name: str) -> bytes:
        """The whole body, within ``timeout`` of its headers (a trickle is cut off)."""
        deadline = time.monotonic() + self.timeout
        chunks = []
        while chunk := body.read(CHUNK):
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise TierUnavailable(f"s3 {self.bucket}/{name}: body not received within "
                                      f"{self.timeout:g} s")
        return b"".join(chunks)

    def _verified(self, name: str, blob: bytes, key: str, kind: str) -> Entry | None:
        try:
            entry = decode(blob, key)
        except CorruptEntry as exc:
            self._discard(name, "corruptions", str(exc))
            return None
        if entry.header.kind != kind:
            self._discard(name, "corruptions",
                          f"holds a {entry.header.kind!r} entry where {kind!r} belongs")
            return None
        if entry.header.expired(self._clock()):
            self.counters.count("expired")
            return None
        return entry

    def contains(self, key: str, kind: str = "audio") -> bool:
        """Whether a live object sits at the entry's name (its body is not read)."""
        if not valid_name(key, kind):
            return False
        found = self._head(self.object_name(key, kind))
        return found is not None and not self._expired(found[1])

    # -- writes --------------------------------------------------------------------
    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> Entry | None:
        """Store an entry unless a live take of its key is stored (first writer wins); the
        take held afterwards — ``entry`` or the first writer's — or None. Pins are kept by
        the local tiers, not here."""
        ref = self.store(entry)
        if ref is None:
            return None
        if ref.digest == blob_digest(entry.blob):
            return entry
        return self.get(entry.header.key, entry.header.kind)  # the first writer's take

    def replace(self, entry: Entry, *, tenant: str = "") -> bool:
        """Store ``entry`` whatever is stored under its key (aligning this tier with the
        take another tier published)."""
        key, kind = entry.header.key, entry.header.kind
        if not valid_name(key, kind) or entry.header.expired(self._clock()):
            return False
        name = self.object_name(key, kind)
        with self._remote("write", name):
            self._put(entry, ObjectRef(name, entry.size, blob_digest(entry.blob)), {})
        self.counters.count("replaced")
        return True

    def store(self, entry: Entry) -> ObjectRef | None:
        """Store ``entry`` unless a live object holds its name; the ref of what is stored
        now (ours or the first writer's), or None (expired, or refused)."""
        key, kind = entry.header.key, entry.header.kind
        if not valid_name(key, kind):
            self.counters.count("refused_names")
            return None
        if entry.header.expired(self._clock()):
            return None
        name = self.object_name(key, kind)
        ours = ObjectRef(name, entry.size, blob_digest(entry.blob))
        with self._remote("write", name):
            for _ in range(2):  # a second round only when the name changed hands meanwhile
                if self._put(entry, ours, {"IfNoneMatch": "*"}):
                    self.counters.count("stores")
                    return ours
                found = self._head(name)
                if found is None:
                    continue  # deleted since: try again
                ref, meta, etag = found
                if not self._expired(meta):
                    return ref
                if self._put(entry, ours, {"IfMatch": etag}):
                    self.counters.count("replaced")
                    return ours
        return None

    def _put(self, entry: Entry, ref: ObjectRef, condition: dict[str, str]) -> bool:
        """Write the object if ``condition`` holds; False when another writer's object
        stands in the way. Without conditional writes: head, then put if free."""
        if not self._conditional:
            if "IfNoneMatch" in condition and self._head(ref.name) is not None:
                return False
            condition = {}
        header = entry.header
        extra: dict[str, Any] = {"Expires": datetime.fromtimestamp(header.expires, UTC)} \
            if header.expires is not None else {}
        try:
            self._s3.put_object(
                Bucket=self.bucket, Key=ref.name, Body=entry.blob,
                ContentType=header.content_type,
                Metadata={EXPIRES: "" if header.expires is None else repr(header.expires),
                          DIGEST: ref.digest, KIND: header.kind},
                **extra, **condition)
        except ClientError as exc:
            code = _code(exc)
            if condition and code in _TAKEN:
                return False
            if condition and code in _UNSUPPORTED:
                self._conditional = False
                log.warning("s3 tier: %s does not support conditional writes; writing "
                            "head-then-put (two simultaneous writers may both write)",
                            self.bucket)
                return self._put(entry, ref, condition)
            raise
        return True

    def delete(self, key: str, kind: str | None = "audio") -> bool:
        """Remove the object (every kind's when ``kind`` is None); True if one was there."""
        if not valid_name(key, kind or "audio"):
            return False
        if kind is None:
            stem = self.object_name(key, "audio").rsplit(".", 1)[0] + "."
            with self._remote("list", stem):
                listed = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=stem)
            names = [item["Key"] for item in listed.get("Contents", [])]
        else:
            name = self.object_name(key, kind)
            names = [name] if self._head(name) is not None else []
        for name in names:
            with self._remote("delete", name):
                self._s3.delete_object(Bucket=self.bucket, Key=name)
        return bool(names)

    def _discard(self, name: str, counter: str, reason: str) -> None:
        """Delete a bad object (best effort) and count it."""
        self.counters.count(counter)
        log.warning("s3 tier: deleted %s/%s: %s", self.bucket, name, reason)
        try:
            self._s3.delete_object(Bucket=self.bucket, Key=name)
        except (BotoCoreError, ClientError) as exc:
            self.faults.report("discard", exc, f"could not delete a bad object {name}")

    # -- helpers ---------------------------------------------------------------------
    def _head(self, name: str) -> tuple[ObjectRef, dict[str, str], str] | None:
        """(ref, metadata, ETag) of the object at ``name``, or None."""
        with self._remote("head", name):
            try:
                response = self._s3.head_object(Bucket=self.bucket, Key=name)
            except ClientError as exc:
                if _code(exc) in _NOT_FOUND:
                    return None
                raise
        meta = response.get("Metadata", {})
        ref = ObjectRef(name, int(response.get("ContentLength", 0)), meta.get(DIGEST, ""))
        return ref, meta, response.get("ETag", "")

    def _expired(self, meta: dict[str, str]) -> bool:
        """What the object's metadata says about its expiry (the envelope is checked too)."""
        raw = meta.get(EXPIRES, "")
        try:
            return bool(raw) and float(raw) <= self._clock()
        except ValueError:
            return False  # unreadable metadata: the envelope decides

    @contextlib.contextmanager
    def _remote(self, doing: str, name: str) -> Iterator[None]:
        """Translate botocore's errors into ``TierUnavailable`` (the stack's miss)."""
        try:
            yield
        except (BotoCoreError, ClientError) as exc:
            self.counters.count("errors")
            raise TierUnavailable(f"s3 {self.bucket}/{name}: {doing} failed: "
                                  f"{type(exc).__name__}: {exc}") from exc

    def health(self) -> TierHealth:
        """``ok`` when the bucket answers HEAD within the timeouts, ``down`` otherwise."""
        try:
            with self._remote("bucket check", ""):
                self._s3.head_bucket(Bucket=self.bucket)
        except TierUnavailable as exc:
            return TierHealth("down", f"{exc} (check AWS_ENDPOINT_URL, the credentials and "
                              "that the bucket exists)")
        return OK

    def stats(self) -> dict[str, Any]:
        """This process's counts (hits, misses, stores, corruptions, errors…); the bucket
        itself says how much it holds."""
        return {"bucket": self.bucket, "prefix": self.prefix,
                "conditional_writes": self._conditional, "counts": self.counters.snapshot()}

    def close(self) -> None:
        """Close the client's connection pool."""
        with contextlib.suppress(Exception):
            self._s3.close()


def _client(timeout: float, connect_timeout: float, attempts: int,
            addressing_style: str | None, region: str | None) -> Any:
    """A boto3 S3 client with bounded timeouts and retries (endpoint and credentials from
    the standard AWS variables)."""
    config = Config(connect_timeout=connect_timeout, read_timeout=timeout,
                    retries={"total_max_attempts": attempts, "mode": "standard"},
                    s3={"addressing_style": addressing_style} if addressing_style else None,
                    max_pool_connections=32)
    with _SESSION_LOCK:  # boto3 sessions are not thread-safe; clients are
        global _SESSION
        if _SESSION is None:
            _SESSION = boto3.session.Session()
        return _SESSION.client("s3", region_name=region, config=config)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _option(name: str, value: Any) -> Any:
    if name not in OPTIONS:
        raise InvalidParameter(f"S3 URL option {name!r} is unknown; known: "
                               f"{', '.join(OPTIONS)}")
    kind = OPTIONS[name]
    try:
        converted = kind(value)
    except (TypeError, ValueError):
        raise InvalidParameter(f"S3 option {name}={value!r} must be a "
                               f"{kind.__name__}") from None
    if kind is not str and (not math.isfinite(converted) or converted <= 0):
        raise InvalidParameter(f"S3 option {name}={value!r} must be a positive number")
    return converted
