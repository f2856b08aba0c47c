"""Weight and reference switches through the gateway, written from api_v2.py and TTS.py:
``/set_gpt_weights``, ``/set_sovits_weights``, ``/set_refer_audio`` and ``/control`` are
proxied, a switch changes the revision in force (so the same request is a MISS rendered by
the new weights, then a HIT), the switch state reaches every process on the cache folder
and survives a restart of voxcache, and a restart of the upstream comes back with the
weights its config file saved. The stand-in's takes depend on the weights it has loaded,
so every assertion about audio compares with what the upstream itself renders."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time

import httpx
import pytest

from voxcache import SynthesisRequest
from voxcache.config import Settings
from voxcache.errors import Overloaded
from voxcache.protocols.gpt_sovits.fields import reference_params
from voxcache.runtime import open_cached_engine
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions, service_options

from .api_v2_setup import (
    WEIGHTS,
    body,
    gateway,
    pcm_of,
    receive,
    standin,
    upstream_folder,
    voice,
)
from .servers import answers, api_v2_process, serve_app, voxcache_serve, wait_until
from .standins import ApiV2

ADMIN = "admin-key-0001"
TENANT = "tenant-key-0001"


def switch(address: str, endpoint: str, headers: dict[str, str] | None = None,
           **params: str) -> httpx.Response:
    return httpx.get(f"{address}{endpoint}", params=params, headers=headers, timeout=30)


def rendered_now(upstream_url: str, **fields: object) -> bytes:
    """What the upstream renders for ``body(**fields)`` with the weights it has now."""
    answer = httpx.post(f"{upstream_url}/tts", json=body(**fields), timeout=30)
    assert answer.status_code == 200, answer.text
    return pcm_of(answer.content)


def revision(address: str) -> str:
    return httpx.get(f"{address}/readyz", timeout=10).json()["model_revision"]


def test_a_weight_switch_makes_the_same_request_a_miss_of_the_new_weights(tmp_path) -> None:
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        before = httpx.post(f"{address}/tts", json=body(), timeout=30)
        old_revision = revision(address)
        switched = switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        after = httpx.post(f"{address}/tts", json=body(), timeout=30)
        expected = rendered_now(url)
        again = httpx.post(f"{address}/tts", json=body(), timeout=30)
        new_revision = revision(address)
    assert (switched.status_code, switched.json()) == (200, {"message": "success"})
    assert upstream.configured["t2s_weights_path"] == WEIGHTS["gpt_b"]  # it reached the upstream
    assert (before.headers["X-Cache"], after.headers["X-Cache"]) == ("MISS", "MISS")
    assert pcm_of(after.content) == expected != pcm_of(before.content)
    assert again.headers["X-Cache"] == "HIT" and again.content == after.content
    assert after.headers["X-Cache-Key"] != before.headers["X-Cache-Key"]
    assert new_revision == f"{old_revision}|gpt=voice-e30.ckpt@" + new_revision.split("@")[-1]
    assert str(upstream.root) not in new_revision  # /readyz answers anyone: no folders


def test_a_failed_switch_changes_nothing_that_renders_and_leaks_no_path(tmp_path) -> None:
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        first = httpx.post(f"{address}/tts", json=body(), timeout=30)
        missing = switch(address, "/set_sovits_weights",
                         weights_path=str(upstream.root / "SoVITS_weights" / "nope.pth"))
        empty = switch(address, "/set_gpt_weights")
        same = httpx.post(f"{address}/tts", json=body(), timeout=30)
    assert missing.status_code == 400
    assert missing.json()["message"] == "change sovits weight failed"
    assert "…/nope.pth" in missing.json()["Exception"] and str(tmp_path) not in missing.text
    assert (empty.status_code, empty.json()) == (400, {"message": "gpt weight path is required"})
    assert same.headers["X-Cache"] == "HIT" and same.content == first.content


def test_stale_while_revalidate_serves_the_old_take_marked_then_the_new_one(tmp_path) -> None:
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache",
                    model_policy="stale-while-revalidate") as address:
        old = httpx.post(f"{address}/tts", json=body(), timeout=30)
        switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        stale = httpx.post(f"{address}/tts", json=body(), timeout=30)
        expected = rendered_now(url)

        def revalidated() -> bool:
            answer = httpx.post(f"{address}/tts", json=body(), timeout=30)
            return answer.headers["X-Cache"] == "HIT" and pcm_of(answer.content) == expected

        wait_until(revalidated, limit=30, what="the background re-render")
    assert stale.headers["X-Cache"] == "STALE" and stale.content == old.content


def test_switches_need_an_admin_key_once_keys_are_configured(tmp_path) -> None:
    keys = {"tenants": {"acme": {"api_keys": [TENANT]}}, "admin": {"api_keys": [ADMIN]}}
    options = service_options(Settings(cache_dir=tmp_path / "c", extra=keys))
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache", options=options) as address:
        anonymous = switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        tenant = switch(address, "/set_gpt_weights", {"Authorization": f"Bearer {TENANT}"},
                        weights_path=WEIGHTS["gpt_b"])
        unchanged = upstream.configured["t2s_weights_path"]
        admin = switch(address, "/set_gpt_weights", {"Authorization": f"Bearer {ADMIN}"},
                       weights_path=WEIGHTS["gpt_b"])
    assert anonymous.status_code == 401 and "admin" in anonymous.json()["message"]
    assert tenant.status_code == 403 and "every tenant" in tenant.json()["message"]
    assert unchanged == WEIGHTS["gpt_a"]
    assert admin.status_code == 200 and upstream.configured["t2s_weights_path"] == WEIGHTS[
        "gpt_b"]


def test_an_embedded_engine_refuses_switches_clearly(tmp_path) -> None:
    app = create_app(Settings(cache_dir=tmp_path / "cache", engine="tone"),
                     options=ServiceOptions())
    with serve_app(app) as address:
        refused = switch(address, "/set_gpt_weights", weights_path="x.ckpt")
        control = switch(address, "/control", command="restart")
    app.state.server.cache.close()
    assert refused.status_code == 400 and "GPT-SoVITS" in refused.json()["message"]
    assert "'tone'" in refused.json()["message"] and control.status_code == 400


@pytest.mark.slow
def test_a_switch_reaches_another_process_and_outlives_a_restart(tmp_path) -> None:
    """Two ``voxcache serve`` processes on one cache folder: a switch through the first
    changes the second's revision (the invalidation log), and a third started afterwards
    reads the recorded switch (the same request is a HIT there, not a MISS of old weights)."""
    cache = tmp_path / "cache"
    with standin(tmp_path) as (upstream, url):
        env = {"VOXCACHE_REFERENCE_ROOTS": str(upstream.root)}
        with voxcache_serve(cache, f"gpt-sovits={url}", env=env) as (one, one_log), \
                voxcache_serve(cache, f"gpt-sovits={url}", env=env) as (two, _two_log):
            old = httpx.post(f"{two}/tts", json=body(), timeout=30)
            assert switch(one, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"]
                          ).status_code == 200
            wait_until(lambda: revision(two) == revision(one), limit=10,
                       what="the second process to see the switch")
            new = httpx.post(f"{two}/tts", json=body(), timeout=30)
            expected = rendered_now(url)
            switched_revision = revision(one)
        assert "UPSTREAM REVISION UNKNOWN" in one_log.read_text()
        with voxcache_serve(cache, f"gpt-sovits={url}", env=env) as (three, three_log):
            restarted = httpx.post(f"{three}/tts", json=body(), timeout=30)
            kept_revision = revision(three)
        assert "UPSTREAM REVISION UNKNOWN" not in three_log.read_text()  # a switch names it
    assert (old.headers["X-Cache"], new.headers["X-Cache"]) == ("MISS", "MISS")
    assert pcm_of(new.content) == expected != pcm_of(old.content)
    assert kept_revision == switched_revision
    assert restarted.headers["X-Cache"] == "HIT" and restarted.content == new.content


@pytest.mark.slow
def test_an_upstream_restart_comes_back_with_its_saved_weights(tmp_path) -> None:
    """api_v2 re-executes itself on ``restart`` and loads what its config file names: the
    last *saved* weights. A successful switch saved them (the revision stays: the same
    request is still a HIT, and the upstream renders exactly that take). A GPT switch that
    failed to load saved its path anyway (``init_t2s_weights`` saves first): after a
    restart the upstream falls back to other weights, and the gateway's revision moves."""
    root, config = upstream_folder(tmp_path)
    with api_v2_process(root, config) as url, \
            gateway(url, root, tmp_path / "cache") as address:
        assert switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"]
                      ).status_code == 200
        first = httpx.post(f"{address}/tts", json=body(), timeout=30)
        restarted = switch(address, "/control", command="restart")
        time.sleep(0.5)
        wait_until(lambda: answers(url), what="the upstream to come back")
        kept = httpx.post(f"{address}/tts", json=body(), timeout=30)
        still = rendered_now(url)
        failed = switch(address, "/set_gpt_weights", weights_path="GPT_weights/gone.ckpt")
        unchanged = httpx.post(f"{address}/tts", json=body(), timeout=30)
        switch(address, "/control", command="restart")
        time.sleep(0.5)
        wait_until(lambda: answers(url), what="the upstream to come back")
        fell_back = httpx.post(f"{address}/tts", json=body(), timeout=30)
        fallback = rendered_now(url)
    assert (restarted.status_code, restarted.json()) == (200, {"message": "success"})
    assert kept.headers["X-Cache"] == "HIT" and pcm_of(kept.content) == still
    assert pcm_of(first.content) == still
    assert failed.status_code == 400 and unchanged.headers["X-Cache"] == "HIT"
    assert fell_back.headers["X-Cache"] == "MISS" and pcm_of(fell_back.content) == fallback
    assert fallback != still


def test_a_clip_replaced_in_place_is_reloaded_before_rendering(tmp_path) -> None:
    """GPT-SoVITS caches its reference by path string: without a reload, the new key of the
    changed clip would be rendered (and stored) with the old voice."""
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        first = httpx.post(f"{address}/tts", json=body(), timeout=30)
        voice(upstream.root / "a.wav", 700)  # the operator replaces the clip in place
        second = httpx.post(f"{address}/tts", json=body(), timeout=30)
    fresh = ApiV2(upstream.root, upstream.config)  # a server that never saw the old clip
    with serve_app(fresh.app) as fresh_url:
        expected = rendered_now(fresh_url)
    assert second.headers["X-Cache"] == "MISS"
    assert second.headers["X-Cache-Key"] != first.headers["X-Cache-Key"]
    assert pcm_of(second.content) == expected != pcm_of(first.content)


def test_the_reload_record_is_shared_by_every_process_on_the_folder(tmp_path) -> None:
    """Two gateways on one folder: the first has the upstream load clip v1, the second
    (after the file changed) v2, then the file goes back to v1. The first must reload: the
    upstream holds v2 under that path now, whatever the first last did."""
    with standin(tmp_path) as (upstream, url):
        path = upstream.root / "a.wav"
        voice(path, 300)
        shutil.copy(path, tmp_path / "v1.wav")
        settings = Settings(cache_dir=tmp_path / "cache", upstream=f"gpt-sovits={url}",
                            reference_roots=[upstream.root])
        one, two = open_cached_engine(settings), open_cached_engine(settings)

        def render(cached, text: str) -> bytes:
            params = {**reference_params(cached.engine.references, "a.wav"),
                      "prompt_text": "Hello there."}
            return cached.synthesize(SynthesisRequest(text, language="en",
                                                      params=params)).audio.pcm

        render(one, "One.")
        voice(path, 700)
        render(two, "Two.")
        shutil.copy(tmp_path / "v1.wav", path)
        back = render(one, "Three.")
        loads = list(upstream.reference_loads)
        fresh = ApiV2(upstream.root, upstream.config)
        with serve_app(fresh.app) as fresh_url:
            expected = rendered_now(fresh_url, text="Three.")
        one.cache.close()
        two.cache.close()
    assert back == expected
    assert len(loads) == 3


def test_aux_clips_changed_in_place_are_refused_not_rendered_stale(tmp_path) -> None:
    """api_v2 keeps the aux clips of the last request and reloads them only for another set
    of paths: the same set with changed content would be rendered stale. Once another set
    went through, the upstream loads that one afresh, and so the changed one too."""
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        first = httpx.post(f"{address}/tts", json=body(aux_ref_audio_paths=["b.wav"]),
                           timeout=30)
        voice(upstream.root / "b.wav", 810)
        changed = httpx.post(f"{address}/tts", json=body(aux_ref_audio_paths=["b.wav"]),
                             timeout=30)
        shutil.copy(upstream.root / "b.wav", upstream.root / "b2.wav")  # the advised fix
        renamed = httpx.post(f"{address}/tts", json=body(aux_ref_audio_paths=["b2.wav"]),
                             timeout=30)
        back = httpx.post(f"{address}/tts", json=body(text="Gate nine.",
                                                      aux_ref_audio_paths=["b.wav"]), timeout=30)
    fresh = ApiV2(upstream.root, upstream.config)
    with serve_app(fresh.app) as fresh_url:
        expected = rendered_now(fresh_url, text="Gate nine.", aux_ref_audio_paths=["b.wav"])
    assert first.status_code == 200 and renamed.status_code == 200, renamed.text
    assert changed.status_code == 400 and "new name" in changed.json()["message"]
    assert back.status_code == 200 and back.headers["X-Cache"] == "MISS"
    assert pcm_of(back.content) == expected  # b.wav as it is now: another set went between
    assert len(upstream.calls) == 3


def test_aux_clips_loaded_before_a_weight_switch_are_not_used_after_it(tmp_path) -> None:
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        fields = body(aux_ref_audio_paths=["b.wav"])
        assert httpx.post(f"{address}/tts", json=fields, timeout=30).status_code == 200
        switch(address, "/set_sovits_weights", weights_path=WEIGHTS["sovits_a"])
        switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        stale = httpx.post(f"{address}/tts", json=fields, timeout=30)
        other = httpx.post(f"{address}/tts", json=body(), timeout=30)
        fresh = httpx.post(f"{address}/tts", json=fields, timeout=30)
    assert stale.status_code == 400 and "weights" in stale.json()["message"]
    assert other.status_code == 200 and fresh.status_code == 200


def test_a_render_keyed_before_a_switch_is_refused_not_stored_under_the_old_key(
        tmp_path) -> None:
    """A request keyed with the old revision that reaches the upstream after the switch
    would store the new weights' take under the old key: it is refused (503, send again)."""
    with standin(tmp_path) as (upstream, url):
        settings = Settings(cache_dir=tmp_path / "cache", upstream=f"gpt-sovits={url}",
                            reference_roots=[upstream.root])
        app = create_app(settings, options=ServiceOptions())
        cached = app.state.server.cached
        params = {**reference_params(cached.engine.references, "a.wav"),
                  "prompt_text": "Hello there."}
        resolved, key = cached.resolve_and_key(SynthesisRequest("Late.", language="en",
                                                                 params=params))
        with serve_app(app) as address:
            assert switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"]
                          ).status_code == 200
        with pytest.raises(Overloaded, match="send it again"):
            list(cached.engine.render(resolved))
        assert cached.cache.get(key) is None and upstream.calls == []
        cached.cache.close()


def test_a_switch_waits_for_the_renders_in_flight(tmp_path) -> None:
    """api_v2 runs a streamed render in a thread: a switch mid-stream would mix two models
    in one take. The gateway holds the switch until the stream is done; that take stays
    the old revision's, and the request after the switch is rendered by the new weights."""
    with standin(tmp_path, interval=0.5) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache") as address:
        streamed: dict[str, object] = {}
        worker = threading.Thread(target=lambda: streamed.update(
            got=receive(address, body(streaming_mode=2))))
        worker.start()
        wait_until(lambda: bool(upstream.sent_at and upstream.sent_at[0]), limit=10,
                   what="the first chunk")
        switched = switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        switched_at = time.monotonic()
        worker.join(30)
        after = receive(address, body(streaming_mode=2))
        expected = rendered_now(url)
    old = streamed["got"]
    assert switched.status_code == 200 and switched_at > upstream.sent_at[0][-1]
    assert old.error is None and old.headers["X-Cache"] == "MISS"  # type: ignore[attr-defined]
    assert after.headers["X-Cache"] == "MISS" and pcm_of(after.content) == expected
    assert pcm_of(old.content) != expected  # type: ignore[attr-defined]


def test_unknown_revision_is_warned_about_only_for_kinds_that_cannot_be_asked(
        tmp_path, caplog) -> None:
    cases = {"gpt-sovits=http://127.0.0.1:9": {}, "cosyvoice=http://127.0.0.1:9": {},
             "openai=http://127.0.0.1:9": {"upstream_options": {"voices": ["alloy"]}},
             "gpt-sovits=http://127.0.0.1:8": {"upstream_revision": "v2pro-2026"}}
    warned = {}
    for number, (spec, options) in enumerate(cases.items()):
        caplog.clear()
        cached = open_cached_engine(Settings(cache_dir=tmp_path / str(number), upstream=spec,
                                             **options))
        warned[spec] = "UPSTREAM REVISION UNKNOWN" in caplog.text
        cached.cache.close()
    assert warned == {"gpt-sovits=http://127.0.0.1:9": True, "cosyvoice=http://127.0.0.1:9": True,
                      "openai=http://127.0.0.1:9": False, "gpt-sovits=http://127.0.0.1:8": False}


def test_an_unreadable_switch_record_serves_no_old_take(tmp_path) -> None:
    """A damaged record cannot say which weights render: nothing stored is served as the
    model in force until a switch records it again (a miss, never the wrong voice)."""
    with standin(tmp_path) as (upstream, url):
        with gateway(url, upstream.root, tmp_path / "cache") as address:
            first = httpx.post(f"{address}/tts", json=body(), timeout=30)
            switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        for record in (tmp_path / "cache" / "upstreams").glob("gpt-sovits-*[0-9a-f].json"):
            record.write_text('{"in_force": ["not", "a", "mapping"]}')
        with gateway(url, upstream.root, tmp_path / "cache") as address:
            damaged = httpx.post(f"{address}/tts", json=body(), timeout=30)
            marked = revision(address)
    assert first.status_code == 200 and damaged.headers["X-Cache"] == "MISS"
    assert marked.endswith("|state=unreadable")



def test_a_full_cache_folder_refuses_the_switch_before_sending_it_and_keeps_serving(
        tmp_path, make_tmpfs) -> None:
    """A switch that cannot be recorded must not happen (the old revision would name the
    new weights' takes): it is refused before the upstream hears of it. Renders fail open:
    served, not stored, with the clip loaded every time (no record can be kept)."""
    folder = make_tmpfs("cachefs", size="4m")
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, folder / "cache") as address:
        assert httpx.post(f"{address}/tts", json=body(), timeout=30).status_code == 200
        filler = folder / "filler"
        with filler.open("wb") as out, contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        refused = switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        unsent = upstream.configured["t2s_weights_path"]
        served = httpx.post(f"{address}/tts", json=body(text="While full."), timeout=30)
        voice(upstream.root / "a.wav", 640)
        changed = httpx.post(f"{address}/tts", json=body(text="While full."), timeout=30)
        filler.unlink()
        accepted = switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
    assert refused.status_code == 503 and "cannot record" in refused.json()["message"]
    assert unsent == WEIGHTS["gpt_a"]  # the upstream never heard of it
    assert accepted.status_code == 200
    assert upstream.configured["t2s_weights_path"] == WEIGHTS["gpt_b"]
    assert served.status_code == 200 and changed.status_code == 200
    assert pcm_of(changed.content) != pcm_of(served.content)  # the new clip, loaded again
    assert upstream.reference_loads.count(str(upstream.root / "a.wav")) >= 2


def test_a_switch_left_unanswered_serves_no_take_as_either_model(tmp_path) -> None:
    """The upstream takes longer to load the weights than the gateway waits: whether they
    loaded is unknown, so a revision no take has stays in force — the next request renders
    anew (by whatever the upstream runs now), never an old take."""
    with standin(tmp_path) as (upstream, url), \
            gateway(url, upstream.root, tmp_path / "cache", upstream_timeout=0.5) as address:
        old = httpx.post(f"{address}/tts", json=body(), timeout=30)
        upstream.switch_seconds = 1.5
        unanswered = switch(address, "/set_gpt_weights", weights_path=WEIGHTS["gpt_b"])
        wait_until(lambda: upstream.configured["t2s_weights_path"] == WEIGHTS["gpt_b"],
                   limit=10, what="the upstream to finish loading")
        time.sleep(0.2)
        after = httpx.post(f"{address}/tts", json=body(), timeout=30)
        expected = rendered_now(url)
        marked = revision(address)
    assert unanswered.status_code == 502
    assert after.headers["X-Cache"] == "MISS" and pcm_of(after.content) == expected
    assert pcm_of(old.content) != expected and "|switching=" in marked
