"""GPT-SoVITS ``api_v2.py`` (``POST /tts``) as an upstream (docs/operating/gateway.md,
"GPT-SoVITS").

Reference clips are keyed by content and read only through the operator's reference folders; before
a render the upstream is made to hold each clip's current content (a record in the cache folder says
what each upstream path had when last loaded; ``GET /set_refer_audio`` reloads it). Weight switches
(``switches``) change the revision in force; every render holds the switchboard's fence
(``upstream.revision``). With ``ref_dir`` uploaded clips are staged there.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import posixpath
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...audio import Audio
from ...errors import InvalidParameter, UpstreamError
from ...references import ReferenceClip, ReferenceFolders
from ...request import ResolvedRequest
from ...upstream.base import UpstreamEngine
from ...upstream.decode import wav_stream
from ...upstream.http import error_fields, error_message
from .fields import LANGUAGES, PARAMS, SEED_LIMIT, aux_paths, clip_params

log = logging.getLogger("voxcache.upstream")

REFERENCE_RECORD_LIMIT = 4096
"""Paths remembered as loaded; a forgotten one is merely loaded again."""
AUX_SENT, AUX_LOADED, STALE = "aux:sent", "aux:loaded", "stale"
"""Entries of the reference record about auxiliary clips (see ``_load_current``)."""


class GptSovitsEngine(UpstreamEngine):
    """Renders misses on a GPT-SoVITS api_v2 server."""

    kind = "gpt-sovits"
    sample_rate = 32000
    params = PARAMS
    languages = tuple(lang.replace("_", "-") for lang in LANGUAGES)
    """Spelled as the resolver canonicalises them (``all_zh`` → ``all-zh``)."""
    default_language = "auto"
    supports_instruct = False
    supports_seed = True
    streams_from_server = True

    def __init__(self, url: str, *, references: ReferenceFolders | None = None,
                 ref_root_upstream: str | Sequence[str] | None = None,
                 ref_dir: str | None = None, ref_dir_upstream: str | None = None,
                 **options: Any) -> None:
        """``references``: the folders clients may name clips in (the service passes the
        ``reference_roots`` setting; none: reference paths are refused).
        ``ref_root_upstream``: where the upstream sees each of those roots (default: the
        same path). ``ref_dir``: where uploaded clips are staged for the upstream."""
        super().__init__(url, **options)
        self.references = references if references is not None else ReferenceFolders()
        self.ref_roots_upstream = _upstream_roots(self.references, ref_root_upstream)
        self.ref_dir = Path(ref_dir) if ref_dir else None
        if self.ref_dir is not None and self.references.contains(self.ref_dir):
            raise InvalidParameter(
                f"ref_dir {ref_dir} lies inside a reference root: every tenant could read the "
                "clips staged there by path; stage uploads in a folder outside reference_roots")
        self.ref_dir_upstream = ref_dir_upstream or ref_dir
        self.supports_reference = self.ref_dir is not None
        self._record: dict[str, str] = {}
        self._record_lock = threading.Lock()
        self._warned_no_reload = False

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """``POST /tts`` and pass its WAV (streamed or not) on as it arrives."""
        self.refuse_unhonoured(request)
        if request.seed is not None and request.seed >= SEED_LIMIT:
            raise InvalidParameter(f"GPT-SoVITS seeds must be below 2**32, got {request.seed}")
        p = request.params
        ref_path, prompt_text, aux = self._reference(request)
        lang = request.language.replace("-", "_")
        body = {name: p[name] for name in PARAMS if name not in (
            "ref_audio_id", "aux_ref_audio_ids", "prompt_text", "prompt_lang")}
        body |= {
            "text": request.text, "text_lang": lang, "ref_audio_path": ref_path,
            "aux_ref_audio_paths": aux, "prompt_text": prompt_text,
            "prompt_lang": p["prompt_lang"] or lang, "speed_factor": request.speed,
            "seed": -1 if request.seed is None else request.seed, "media_type": "wav",
        }
        fence = (self.switchboard.rendering(request.model_revision)
                 if self.switchboard is not None else contextlib.nullcontext())
        with fence:
            if request.reference_audio is None:
                self._load_current(ref_path, p["ref_audio_id"], aux, p["aux_ref_audio_ids"])
            with self.client.stream("POST", "/tts", json=body) as chunks:
                for audio in wav_stream(chunks):
                    self.sample_rate = audio.sample_rate  # the model's rate, known from answers
                    yield audio

    def _load_current(self, path: str, clip: str, aux: list[str], aux_clips: str) -> None:
        """Make the upstream render from the clips' current content, not what it loaded for
        the same path strings before (see the module's notes).

        The record maps each upstream path to the content it had when the gateway last had
        it loaded; ``AUX_SENT`` is the set of aux paths of the last render (api_v2 keeps the
        aux clips of the last request and reloads them only for another set) and
        ``AUX_LOADED`` their contents then — ``STALE`` once other weights were loaded."""
        with self._reference_record() as loaded:
            if loaded is None:  # no record can be kept: the clip is loaded every time
                self._reload(path)
                return
            aux_set = json.dumps(sorted(set(aux)))
            if aux and loaded.get(AUX_SENT) == aux_set and loaded.get(AUX_LOADED) != aux_clips:
                raise InvalidParameter(
                    "GPT-SoVITS still holds these aux_ref_audio_paths clips as it loaded them "
                    "before they (or its weights) changed, and reloads them only for another "
                    "set of paths; save the changed clip under a new name, or have an admin "
                    "restart the upstream through /control?command=restart")
            if loaded.get(path) != clip and not self._reload(path):
                return  # a server without /set_refer_audio: it alone decides what it reuses
            loaded.pop(path, None)  # re-inserted: the oldest paths are forgotten first
            loaded[path] = clip
            loaded[AUX_SENT], loaded[AUX_LOADED] = aux_set, aux_clips
            while len(loaded) > REFERENCE_RECORD_LIMIT:
                loaded.pop(next(name for name in loaded if name not in (AUX_SENT, AUX_LOADED)))

    def _reload(self, path: str) -> bool:
        """``GET /set_refer_audio`` for ``path``; False when the server has no such route."""
        answer = self.client.exchange("GET", "/set_refer_audio",
                                      params={"refer_audio_path": path})
        if answer.status_code in (404, 405):
            if not self._warned_no_reload:
                self._warned_no_reload = True
                log.warning("upstream %s has no /set_refer_audio: a clip replaced in place "
                            "under the same path may be rendered with its old voice", self.url)
            return False
        if answer.status_code != 200:  # e.g. a clip outside GPT-SoVITS' 3-10 s
            # what /tts itself answers when it fails to load the clip (the URL without its
            # query: the path is in the upstream's own words, scrubbed)
            reason = error_fields(answer.content).get("Exception") or error_message(
                answer.content)
            raise UpstreamError(f"upstream {self.url}/set_refer_audio answered "
                                f"{answer.status_code} loading the reference clip: {reason}",
                                upstream_status=answer.status_code,
                                upstream_reply={"message": "tts failed", "Exception": reason})
        return True

    @contextlib.contextmanager
    def _reference_record(self) -> Iterator[dict[str, str] | None]:
        """The shared record once attached to a cache folder; this process's own before."""
        if self.switchboard is not None:
            with self.switchboard.references() as loaded:
                yield loaded
            return
        with self._record_lock:
            yield self._record

    def _reference(self, request: ResolvedRequest) -> tuple[str, str, list[str]]:
        """The path, prompt text and aux paths to send, after checking they match the key."""
        p = request.params
        if request.reference_audio is not None:
            if p["ref_audio_path"] or p["prompt_text"]:
                raise InvalidParameter(
                    "send either reference audio or ref_audio_path/prompt_text, not both")
            return self._stage(request), request.prompt_text or "", []
        path = p["ref_audio_path"]
        if not path:
            raise InvalidParameter(
                "GPT-SoVITS needs a reference voice: set ref_audio_path (a clip in this "
                "server's reference folders)"
                + (" or send reference audio" if self.ref_dir else ""))
        aux = aux_paths(p["aux_ref_audio_paths"])
        main = self.references.read(path, request.tenant)
        aux_clips = [self.references.read(a, request.tenant) for a in aux]
        expected = clip_params(path, main, aux, aux_clips)
        for name in ("ref_audio_id", "aux_ref_audio_ids"):
            if p[name] != expected[name]:
                raise InvalidParameter(
                    f"{name} does not match the reference clip on disk now (it changed after "
                    "the request was keyed, or the id was not computed from it); send the "
                    "request again, or build the parameters with "
                    "voxcache.protocols.gpt_sovits.fields.reference_params")
        return (self._upstream_path(main), p["prompt_text"],
                [self._upstream_path(c) for c in aux_clips])

    def _upstream_path(self, clip: ReferenceClip) -> str:
        """The file the gateway read, as the upstream sees it."""
        return posixpath.join(self.ref_roots_upstream[clip.root], clip.relative.as_posix())

    def _stage(self, request: ResolvedRequest) -> str:
        """Write an uploaded clip where the upstream can read it; return its upstream path."""
        if self.ref_dir is None or request.reference_audio is None:
            raise InvalidParameter("this GPT-SoVITS upstream has no ref_dir for uploaded audio")
        name = f"{request.reference_fingerprint}.wav"
        target = self.ref_dir / name
        if not target.exists():
            self.ref_dir.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=self.ref_dir, suffix=".tmp")
            with os.fdopen(fd, "wb") as out:
                out.write(request.reference_audio)
            os.replace(temp, target)  # same bytes whoever wins: the name is their fingerprint
        return f"{str(self.ref_dir_upstream).rstrip('/')}/{name}"


def _upstream_roots(references: ReferenceFolders,
                    given: str | Sequence[str] | None) -> tuple[str, ...]:
    """One upstream path per reference root; by default each root's own (a shared mount)."""
    if given is None:
        return tuple(str(r.configured) for r in references.roots)
    roots = (given,) if isinstance(given, str) else tuple(given)
    if len(roots) != len(references.roots) or not all(isinstance(r, str) for r in roots):
        raise InvalidParameter(
            f"ref_root_upstream must name one upstream folder per reference root "
            f"({len(references.roots)} configured: "
            f"{', '.join(str(r.configured) for r in references.roots) or 'none'}), "
            f"got {given!r}")
    return roots
