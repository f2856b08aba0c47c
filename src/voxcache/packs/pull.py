"""``pack pull URL``: fetch a center's pack for a selection and import it, resumably.

One round: ask the center to build a pack (``POST /v1/packs``, a delta against the
snapshot this node last imported completely from it), download the file into
``packs/incoming/`` (``Range`` resumes a download cut short — the center keeps the
same immutable file), then import it like ``pack import`` (the signature checked
against the trusted keys before anything else). Only a complete import advances the
snapshot; a round that dies at any point is taken up again by the next one: the
partial download resumes, a downloaded pack is imported again (what is already here
is skipped), and an entry refused as damaged is asked for again next time.

The state of each (URL, selection) lives in ``packs/pulls/<id>.json``; an flock on
``<id>.lock`` keeps two pulls of the same source from running at once.
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
from .signing import PublicKey

PULLS = Path("packs") / "pulls"
INCOMING = Path("packs") / "incoming"
CHUNK = 1 << 16

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
        pack, descriptor = None, None
        if state.get("pending"):
            pack = _download(client, root, state["pending"], on_bytes)
        if pack is None:
            descriptor = _prepare(client, source.selection, state.get("snapshot"))
            state["pending"] = descriptor["digest"]
            _save(root, source, state)
            pack = _download(client, root, descriptor["digest"], on_bytes)
            if pack is None:
                raise UpstreamError(f"the center built pack {descriptor['digest'][:12]} but "
                                    "does not serve it; try again")
        try:
            with open(pack, "rb") as stream:
                report: Imported = import_pack(cache, stream, trusted, pin=pin,
                                               progress=on_entries)
        except InvalidParameter:  # untrusted or unreadable: never try this file again
            pack.unlink(missing_ok=True)
            state["pending"] = None
            _save(root, source, state)
            raise
        pack.unlink(missing_ok=True)
        state["pending"] = None
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


def _download(client: Any, root: Path, digest: str, on_bytes: Bytes | None) -> Path | None:
    """The complete pack file, resuming a partial one; None when the center no longer has it."""
    import httpx

    if not DIGEST.fullmatch(digest):
        return None
    folder = root / INCOMING
    private_dirs(folder)
    done, part = folder / f"{digest}.vxpack", folder / f"{digest}.vxpack.part"
    if done.exists():
        return done
    have = part.stat().st_size if part.exists() else 0
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
            total = have + int(response.headers.get("content-length", 0))
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "r+b") as out:
                out.truncate(have)
                out.seek(have)
                for chunk in response.iter_bytes(CHUNK):
                    out.write(chunk)
                    have += len(chunk)
                    if on_bytes is not None:
                        on_bytes(have, total)
    except httpx.HTTPError as exc:
        raise UpstreamError(f"downloading pack {digest[:12]} failed ({type(exc).__name__}: "
                            f"{exc}); the next pull resumes it") from None
    os.replace(part, done)
    return done


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
