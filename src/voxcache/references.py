"""Reference clips named by path: the only code that opens a path a client chose.

A path is read only inside the operator's ``reference_roots`` (a tenant under
``<root>/<tenant>/``), without ``..``, symlinks resolved and re-checked, opened with
``O_NOFOLLOW`` and checked again by the kernel's name for the open file, regular files
only, capped in size. Every refusal looks the same to the caller (the reason is logged
at DEBUG), so an answer says nothing about the world outside the roots.
docs/operating/security.md, "Reference paths", has the whole story and what it leaves out.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .errors import BadReferenceAudio, CacheDirError, InvalidParameter, UnsupportedFeature

log = logging.getLogger("voxcache.references")

DEFAULT_MAX_BYTES = 10 << 20
"""Largest clip read by path: the same default as an uploaded clip."""
DEFAULT_TENANT = "default"
MAX_PATH_CHARS = 4096
TENANT_FOLDER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
"""A tenant id usable as one folder name (no ``.``/``..``, nothing hidden)."""
OPEN_FLAGS = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
              | getattr(os, "O_NOCTTY", 0))


class ReferencePathsOff(UnsupportedFeature):
    """The server has no reference roots, so it reads no reference path at all."""


class ReferenceTooLarge(BadReferenceAudio):
    """A clip inside the roots that is over the size cap."""


@dataclass(frozen=True, slots=True)
class ReferenceRoot:
    """A folder clients may name clips in: as the operator wrote it, and as the kernel sees it."""

    configured: Path
    real: Path


@dataclass(frozen=True, slots=True)
class ReferenceClip:
    """A clip read through the roots, and where it was: ``roots[root] / relative``."""

    data: bytes
    root: int
    relative: PurePosixPath


class _Refused(Exception):
    """Why one candidate was not read (logged for the operator, never sent to the client)."""


class ReferenceFolders:
    """The operator's reference roots, and the one way to read a clip a client names in them."""

    def __init__(self, roots: Iterable[str | Path] = (), *, max_bytes: int = DEFAULT_MAX_BYTES,
                 per_tenant: bool = False, cache_dir: str | Path | None = None) -> None:
        """``per_tenant``: the service has API keys, so every tenant (``default`` included)
        is confined to ``<root>/<tenant>/``. ``cache_dir`` may neither contain a root nor lie
        inside one: stored takes and uploaded voice clips must never be readable by path."""
        if max_bytes < 1:
            raise InvalidParameter(f"reference_max_bytes must be at least 1, got {max_bytes}")
        self.max_bytes = max_bytes
        self.per_tenant = per_tenant
        self.roots = tuple(_root(r) for r in roots)
        if cache_dir is not None:
            for root in self.roots:
                _refuse_cache_overlap(root, Path(cache_dir))

    def contains(self, path: str | Path) -> bool:
        """Whether ``path`` (resolved) lies in or is one of the roots."""
        real = os.path.realpath(path)
        return any(_inside(real, str(r.real)) or real == str(r.real) for r in self.roots)

    def read(self, path: str, tenant: str = DEFAULT_TENANT) -> ReferenceClip:
        """The bytes of the clip ``path`` names for ``tenant``, or the one refusal."""
        if not self.roots:
            raise ReferencePathsOff(
                "this server does not read reference paths (ref_audio_path): its operator has "
                "set no reference_roots (VOXCACHE_REFERENCE_ROOTS), the folders clients may "
                "name clips in. Upload the clip instead (POST /v1/voices, then use its voice "
                "id) or send the audio itself (reference_audio on POST /v1/synthesize)")
        try:
            for index, base, relative in self._candidates(path, tenant):
                try:
                    opened, data = self._read_inside(base, relative)
                except _Refused as why:
                    log.debug("reference path %r refused under %s: %s", path, base, why)
                    continue
                root = str(self.roots[index].real)
                return ReferenceClip(data, index, PurePosixPath(os.path.relpath(opened, root)))
        except _Refused as why:
            log.debug("reference path %r refused: %s", path, why)
        raise BadReferenceAudio(
            f"ref_audio_path {_shown(path)} is not a readable reference clip inside this "
            "server's reference folders; name a clip (relative to your reference folder) that "
            "exists there")

    def _candidates(self, path: str, tenant: str) -> Iterator[tuple[int, str, PurePosixPath]]:
        """(root index, folder the tenant may read there, path relative to it), in root order."""
        if not _usable(path):
            raise _Refused("not a usable path string")
        wanted = PurePosixPath(path)
        if ".." in wanted.parts:
            raise _Refused("'..' component")
        folder = self._tenant_folder(tenant)
        for index, root in enumerate(self.roots):
            base = root.real / folder
            if not wanted.is_absolute():
                yield index, str(base), wanted
                continue
            for spelling in (root.configured / folder, base):
                if wanted.is_relative_to(spelling) and wanted != spelling:
                    yield index, str(base), wanted.relative_to(spelling)
                    break

    def _tenant_folder(self, tenant: str) -> str:
        """'' for the whole root (the single tenant), else the tenant's own sub-folder."""
        if tenant == DEFAULT_TENANT and not self.per_tenant:
            return ""
        if not TENANT_FOLDER.fullmatch(tenant):
            raise _Refused(f"tenant {tenant!r} cannot be a folder name")
        return tenant

    def _read_inside(self, base: str, relative: PurePosixPath) -> tuple[str, bytes]:
        """Open ``base/relative`` so that what is read provably lies inside ``base``."""
        resolved = os.path.realpath(os.path.join(base, relative))
        if not _inside(resolved, base):
            raise _Refused(f"resolves to {resolved}, outside")
        try:
            fd = os.open(resolved, OPEN_FLAGS)
        except OSError as exc:
            raise _Refused(f"cannot open: {exc.strerror}") from None
        try:
            opened = _opened_path(fd)
            if not _inside(opened, base):
                raise _Refused(f"the kernel opened {opened}, outside (swapped during the check)")
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _Refused("not a regular file")
            if info.st_size > self.max_bytes:
                raise self._too_large(relative)
            with os.fdopen(fd, "rb", closefd=False) as stream:
                data = stream.read(self.max_bytes + 1)
            if len(data) > self.max_bytes:  # it grew after fstat
                raise self._too_large(relative)
            return opened, data
        except OSError as exc:
            raise _Refused(f"cannot read: {exc.strerror}") from None
        finally:
            os.close(fd)

    def _too_large(self, relative: PurePosixPath) -> ReferenceTooLarge:
        """Said only of a file inside the caller's own folder, so the limit is safe to name."""
        return ReferenceTooLarge(
            f"reference clip {_shown(str(relative))} is over this server's limit of "
            f"{self.max_bytes} bytes (reference_max_bytes); send a shorter clip")


def _root(value: str | Path) -> ReferenceRoot:
    configured = Path(value).expanduser()
    if not configured.is_absolute():
        raise InvalidParameter(f"reference root {str(value)!r} must be an absolute folder")
    return ReferenceRoot(Path(os.path.normpath(configured)), Path(os.path.realpath(configured)))


def _refuse_cache_overlap(root: ReferenceRoot, cache_dir: Path) -> None:
    cache = os.path.realpath(cache_dir)
    real = str(root.real)
    if cache == real or _inside(cache, real):
        where = "contains"
    elif _inside(real, cache):
        where = "lies inside"
    else:
        return
    raise CacheDirError(
        f"reference root {root.configured} {where} the cache folder {cache_dir}: clients "
        "could read stored takes and other tenants' voice clips by path. Name reference "
        "folders outside the cache (reference_roots / VOXCACHE_REFERENCE_ROOTS)")


def _usable(path: object) -> bool:
    """A string the file system can take: not empty, not huge, no NUL, encodable."""
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS or "\0" in path:
        return False
    try:
        os.fsencode(path)
    except UnicodeEncodeError:  # a lone surrogate from JSON ("\ud800")
        return False
    return True


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` lies strictly below ``folder`` (both absolute and normalised)."""
    return path.startswith(folder.rstrip("/") + "/") and path != folder


def _opened_path(fd: int) -> str:
    """The kernel's name for what ``fd`` is: no path re-resolution can be raced here."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        raise _Refused("cannot confirm what was opened (/proc is not mounted)") from None


def _shown(path: object) -> str:
    """The caller's own path, quoted and shortened for a message."""
    text = str(path)
    return repr(text if len(text) <= 200 else text[:200] + "…")
