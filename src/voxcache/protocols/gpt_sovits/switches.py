"""GPT-SoVITS ``api_v2`` weight and control calls: what each leaves in force on the upstream.

The upstream keeps its weights in three places that can disagree — loaded, configured
(``TTS_Config``) and saved (``tts_infer.yaml``, rewritten whole by every ``save_configs()``) — and
each call changes them differently (docs/operating/gateway.md, "Switching weights", has the table
read from ``api_v2.py`` and ``TTS.py``). The revision in force names each loaded weights file by its
name and a hash of its path (``gpt=s1v3.ckpt@1a2b3c4d5e6f``): readable, distinct for every path, and
without the upstream's folders (``/readyz`` shows it to anyone).
"""

from __future__ import annotations

import posixpath
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import blake3

from ...errors import InvalidParameter, UpstreamError
from .upstream import AUX_LOADED, AUX_SENT, STALE

if TYPE_CHECKING:
    from .upstream import GptSovitsEngine

WEIGHTS = {"/set_gpt_weights": "gpt", "/set_sovits_weights": "sovits"}
"""The weight switches, and the name each puts in the revision."""
SAVES_BEFORE_LOADING = frozenset({"gpt"})
"""``init_t2s_weights`` writes the config file before loading; ``init_vits_weights`` after."""
RESTARTS = frozenset({"restart", "exit"})
"""``/control`` commands after which the upstream (once running again) loads the saved weights."""

ENDPOINTS = ("/set_gpt_weights", "/set_sovits_weights", "/set_refer_audio", "/control")
"""api_v2's GET endpoints besides /tts, each proxied by the gateway."""
SWITCH_WAIT = 300.0
"""Seconds a switch waits for the renders in flight before it gives up (503)."""

State = dict[str, Any]


def proxy(engine: GptSovitsEngine, endpoint: str, params: Mapping[str, str]) -> Any:
    """Send one of api_v2's switch or control calls and keep the revision in force.

    Returns the upstream's response (an ``httpx.Response``), or None when the upstream
    dropped the connection because it restarted (api_v2 re-executes itself before it
    answers ``restart``). The engine must be attached to a cache folder: the switch is
    recorded there for every process and every restart of voxcache."""
    board = engine.switchboard
    if board is None:
        raise InvalidParameter("attach the engine to a cache folder before switching weights")
    if endpoint == "/set_refer_audio":
        answer = engine.client.exchange("GET", endpoint, params=params)
        # it loaded a main clip (which, the record cannot say); its aux clips are as they were
        board.forget_references(keep=(AUX_SENT, AUX_LOADED))
        return answer
    command = params.get("command")
    with board.switching(SWITCH_WAIT) as state:
        # Recorded before it is sent: if the outcome cannot be recorded afterwards (the
        # folder filled up), a revision no take has stays in force, never the old one.
        board.commit(_pending(state))
        try:
            answer = engine.client.exchange("GET", endpoint, params=params)
        except UpstreamError as exc:
            if not _reached(exc):
                board.commit(state)  # refused at connect: nothing reached the upstream
            elif endpoint == "/control" and command in RESTARTS:
                board.commit(after_restart(state))
                board.forget_references()  # a new process starts with an empty prompt cache
                return None
            # else reached but unanswered (timed out, dropped): what it loaded is unknown,
            # so the pending revision, which no take has, stays in force
            raise
        restarted = endpoint == "/control" and command in RESTARTS and answer.status_code == 200
        if endpoint in WEIGHTS:
            new = after_switch(state, endpoint, params.get("weights_path"), answer.status_code)
        else:
            new = after_restart(state) if restarted else state
        board.commit(new)
        if restarted:
            board.forget_references()
        elif new != state:  # references are processed by the weights in force: load them again
            # (api_v2 keeps the aux clips it processed with the old weights: never to be used)
            board.forget_references(keep=(AUX_SENT,), mark={AUX_LOADED: STALE})
    return answer


def _pending(state: Mapping[str, Any]) -> State:
    """The state while a call is on its way: a revision of its own, used by nothing stored."""
    pending = _copy(state)
    pending["in_force"] = {**(state.get("in_force") or {}),
                           "switching": secrets.token_hex(6)}
    return pending


def after_switch(state: Mapping[str, Any], endpoint: str, path: str | None,
                 status: int) -> State:
    """The state after ``endpoint`` (a weight switch to ``path``) answered ``status``."""
    slot = WEIGHTS[endpoint]
    new = _copy(state)
    if not path:
        return new  # api_v2 refuses an empty path before it touches anything
    if status >= 500 or status in (404, 405, 422):
        return new  # not api_v2's verdict on a load: nothing is known to have changed
    new["configured"][slot] = path
    succeeded = 200 <= status < 300
    if succeeded:
        new["loaded"][slot] = path
    if succeeded or slot in SAVES_BEFORE_LOADING:
        new["saved"] = dict(new["configured"])
    return _in_force(new)


def after_restart(state: Mapping[str, Any]) -> State:
    """The state once the upstream runs again after ``restart`` (or ``exit`` and a start)."""
    new = _copy(state)
    new["loaded"] = dict(new["saved"])
    new["configured"] = dict(new["saved"])
    return _in_force(new)


def label(path: str) -> str:
    """A weights path as it appears in the revision: its file name and a hash of the path."""
    name = posixpath.basename(path.replace("\\", "/").rstrip("/")) or "weights"
    return f"{name}@{blake3.blake3(path.encode()).hexdigest()[:12]}"


def _reached(exc: UpstreamError) -> bool:
    """Whether a failed call reached the upstream (it was not refused at connect time)."""
    import httpx

    return not isinstance(exc.__context__, httpx.ConnectError | httpx.ConnectTimeout)


def _copy(state: Mapping[str, Any]) -> State:
    return {**state, **{part: dict(state.get(part) or {})
                        for part in ("loaded", "configured", "saved")}}


def _in_force(state: State) -> State:
    state["in_force"] = {slot: label(path) for slot, path in state["loaded"].items()}
    return state
