"""``pack pull URL``: fetch a center's pack for a selection and import it, resumably.

One round asks the center for a pack (``POST /v1/packs``, a delta against the snapshot
last imported completely), downloads it into ``packs/incoming/`` (``Range`` resumes a
cut-short download), then imports it like ``pack import``. Only a complete import
advances the snapshot; a round that dies is taken up by the next. State per (URL,
selection) is ``packs/pulls/<id>.json``, guarded by an flock. docs/operating/edge.md, "The edge".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from ..cache import Cache
from ..errors import InvalidParameter, UpstreamError
from ..fsmode import private_dirs, write_private
from ..upstream.base import check_url
from ..upstream.http import error_message
from .importer import Imported, import_pack
from .manifest import DIGEST
from .select import Selection
from .sequence import StalePack
from .signing import PublicKey

PULLS = Path("packs") / "pulls"
INCOMING = Path("packs") / "incoming"
CHUNK = 1 << 16
MAX_PACK_BYTES = 1 << 40
"""No pack is larger (a terabyte): the bound of a download whose descriptor states no size."""

Bytes = Callable[[int, int], None]
"""Download progress: (bytes so far, bytes in all)."""


class PullBusy(InvalidParameter):
    """Another pull of the same source is running on this cache folder."""


@dataclass(frozen=True, slots=True)
class Source:
    """A center to pull from: its URL, the admin key and the selection."""

    url: str
    api_key: str | None
    selection: Selection

    @property
    def id(self) -> str:
        """Names this source's state files (URL and selection both matter)."""
        spec = json.dumps([self.url, self.selection.describe()], sort_keys=True)
        return blake3.blake3(spec.encode()).hexdigest()[:16]


def pull_once(cache: Cache, source: Source, trusted: list[PublicKey], *, pin: bool = False,
              timeout: float = 300.0, on_bytes: Bytes | None = None,
              on_entries: Any = None) -> dict[str, Any]:
    """One round (see the module docstring); returns a JSON summary."""
    root = Path(cache.root)
    check_url(source.url)
    with _exclusive(root / PULLS / f"{source.id}.lock"), _client(source, timeout) as client:
        state = _load(root, source)
        descriptor = None
        for _attempt in range(2):
            pack = None
            if state.get("pending"):
                pack = _download(client, root, state["pending"], state.get("pending_size"),
                                 on_bytes)
            fresh = pack is None
            if fresh:
                descriptor = _prepare(client, source.selection, state.get("snapshot"))
                state["pending"] = descriptor["digest"]
                state["pending_size"] = descriptor.get("size")
                _save(root, source, state)
                pack = _download(client, root, descriptor["digest"], descriptor.get("size"),
                                 on_bytes)
                if pack is None:
                    raise UpstreamError(f"the center built pack {descriptor['digest'][:12]} "
                                        "but does not serve it; try again")
            try:
                with open(pack, "rb") as stream:
                    report: Imported = import_pack(cache, stream, trusted, pin=pin,
                                                   progress=on_entries,
                                                   expect=state["pending"])
            except InvalidParameter as exc:  # untrusted, unreadable, stale: never again
                pack.unlink(missing_ok=True)
                state["pending"] = state["pending_size"] = None
                _save(root, source, state)
                if isinstance(exc, StalePack) and not fresh:
                    continue  # an older pack left pending by an earlier round: ask anew
                raise
            break
        pack.unlink(missing_ok=True)
        state["pending"] = state["pending_size"] = None
        if report.complete and report.snapshot:
            state["snapshot"] = report.snapshot
        _save(root, source, state)
    return {**report.describe(), "snapshot": state.get("snapshot"),
            "delta": bool(descriptor and descriptor.get("base"))}


def _prepare(client: Any, selection: Selection, base: str | None) -> dict[str, Any]:
    body = {**selection.describe(), "base": base}
    response = _call(client, "POST", "/v1/packs", json=body)
    try:
        descriptor = response.json()
    except ValueError:
        descriptor = None
    if not isinstance(descriptor, dict) or not DIGEST.fullmatch(str(descriptor.get("digest"))):
        raise UpstreamError("the center's answer to POST /v1/packs names no pack")
    return descriptor


def _download(client: Any, root: Path, digest: str, size: Any, on_bytes: Bytes | None
              ) -> Path | None:
    """The complete pack file, resuming a partial one; None when the center no longer has it.

    At most ``size`` bytes (the size the center's descriptor announced, itself at most
    ``MAX_PACK_BYTES``) are written: a body that would pass it is refused as it arrives,
    so no answer can fill the disk. The file is named by the digest it was asked for; the
    import checks that it holds that manifest."""
    import httpx

    if not DIGEST.fullmatch(digest):
        return None
    limit = _size_limit(size)
    folder = root / INCOMING
    private_dirs(folder)
    done, part = folder / f"{digest}.vxpack", folder / f"{digest}.vxpack.part"
    if done.exists():
        return done
    have = part.stat().st_size if part.exists() else 0
    if have > limit:
        part.unlink()
        have = 0
    headers = {"Range": f"bytes={have}-", "If-Range": f'"{digest}"'} if have else {}
    try:
        with client.stream("GET", f"/v1/packs/{digest}", headers=headers) as response:
            if response.status_code == 404:
                part.unlink(missing_ok=True)
                return None
            if response.status_code not in (200, 206):
                response.read()
                _refuse(response)
            if response.status_code == 200:
                have = 0  # the whole file (the center could not resume)
            total = have + _content_length(response, limit - have, part)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "r+b") as out:
                out.truncate(have)
                out.seek(have)
                for chunk in response.iter_bytes(CHUNK):
                    if have + len(chunk) > limit:
                        out.truncate(0)
                        raise UpstreamError(f"the center sent more than the {limit:,} bytes "
                                            f"pack {digest[:12]} has; download stopped")
                    out.write(chunk)
                    have += len(chunk)
                    if on_bytes is not None:
                        on_bytes(have, total)
    except httpx.HTTPError as exc:
        raise UpstreamError(f"downloading pack {digest[:12]} failed ({type(exc).__name__}: "
                            f"{exc}); the next pull resumes it") from None
    os.replace(part, done)
    return done


def _size_limit(size: Any) -> int:
    """The bytes a download may have: the descriptor's size when it states a sane one."""
    if isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_PACK_BYTES:
        return size
    return MAX_PACK_BYTES


def _content_length(response: Any, most: int, part: Path) -> int:
    """The answer's declared length, refused before a byte is read when it is not a count
    or is over ``most`` (the partial file is dropped then: the next pull starts afresh)."""
    raw = response.headers.get("content-length")
    if raw is None:
        return most
    problem = "is not a byte count" if not (raw.isascii() and raw.isdigit()) else \
        f"is over the {most:,} bytes the pack can still have" if int(raw) > most else None
    if problem is not None:
        part.unlink(missing_ok=True)
        raise UpstreamError(f"the center answered with Content-Length {raw[:40]!r}, which "
                            f"{problem}; download refused")
    return int(raw)


def _call(client: Any, method: str, path: str, **kwargs: Any) -> Any:
    import httpx

    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise UpstreamError(f"the center at {client.base_url} cannot be reached "
                            f"({type(exc).__name__}: {exc})") from None
    if not 200 <= response.status_code < 300:
        _refuse(response)
    return response


def _refuse(response: Any) -> None:
    status = response.status_code
    hint = " (pack pull needs an [admin] key of the center: --api-key-file)" \
        if status in (401, 403) else ""
    raise UpstreamError(f"the center answered {response.request.method} {response.url.path} "
                        f"with {status}: {error_message(response.content)}{hint}",
                        upstream_status=status)


@contextlib.contextmanager
def _client(source: Source, timeout: float) -> Iterator[Any]:
    import httpx

    headers = {"Authorization": f"Bearer {source.api_key}"} if source.api_key else {}
    with httpx.Client(base_url=source.url, headers=headers, follow_redirects=False,
                      timeout=httpx.Timeout(timeout, connect=10.0)) as client:
        yield client


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    private_dirs(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise PullBusy("another pull from this source is running on this cache folder; "
                           "it will be taken up by the next round") from None
        yield
    finally:
        os.close(fd)


def _load(root: Path, source: Source) -> dict[str, Any]:
    try:
        state = json.loads((root / PULLS / f"{source.id}.json").read_bytes())
    except (OSError, ValueError):
        return {"url": source.url, "selection": source.selection.describe()}
    return state if isinstance(state, dict) else {}


def _save(root: Path, source: Source, state: dict[str, Any]) -> None:
    write_private(root / PULLS / f"{source.id}.json",
                  json.dumps(state, sort_keys=True, indent=1).encode())
