"""The contract every engine keeps, as a pytest class to subclass (like ``tier_contract``).

Subclass ``EngineContract`` with fixtures ``engine``, ``load_spec`` (how ``--engine``
names it) and ``variant_engine`` (one weight or voice file changed); docs/internals/extending.md
shows one. It checks each promise against what the engine declares: its split agrees with
its render, ``segment_gap`` is in the take on every path, the model revision is stable
across processes and changes with the files, declared parameters are keyed and others
refused, determinism and concurrency as declared, awkward text, canonical PCM chunks.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..audio import Audio
from ..cache import Cache
from ..cached import CachedEngine
from ..engine import DETERMINISM, Engine, JoinRule
from ..errors import EngineError, RequestError, UnsupportedFeature
from ..policies.clauses import split_clauses
from ..request import SynthesisRequest

TEXTS = {
    "en": ["The doors are closing. Please stand clear of the doors!",
           "Your order number is ready at the counter. Thank you for waiting; enjoy your meal.",
           "Is this the train to Leeds? Yes, it leaves from platform four."],
    "zh": ["列车即将进站。请站在黄线以外！", "欢迎光临。祝您用餐愉快！"],
    "ja": ["ドアが閉まります。ご注意ください！", "ご乗車ありがとうございます。次は東京です。"],
}
CLAUSE_TEXTS = {"en": "Thanks for waiting, your order has shipped. It costs 1,000 dollars.",
                "zh": "感谢您的耐心等待，您的订单已经发货。",
                "ja": "お待たせしました、ご注文は発送済みです。"}
UNICODE = {"en": "Café déjà vu — naïve façade, résumé… “quoted” ✓ 42 °C.",
           "zh": "温度是42°C，“请注意”安全✓。", "ja": "温度は42°Cです、「注意」してください✓。"}


def _texts(engine: Engine) -> list[str]:
    language = engine.default_language.split("-")[0].lower()
    return TEXTS.get(language, TEXTS["en"])


class EngineContract:
    """What every engine promises; subclasses provide the ``engine`` fixture."""

    @pytest.fixture
    def engine(self) -> Engine:  # pragma: no cover - subclasses override
        raise NotImplementedError("provide an `engine` fixture")

    @pytest.fixture
    def load_spec(self) -> str | None:
        """How ``--engine`` names it (None: it cannot be loaded by name)."""
        return None

    @pytest.fixture
    def variant_engine(self) -> Engine | None:
        """The engine with one weight or voice file changed (None: skip that check)."""
        return None

    @pytest.fixture
    def cached(self, engine: Engine) -> Iterator[CachedEngine]:
        with tempfile.TemporaryDirectory() as folder:
            cache = Cache(Path(folder))
            yield CachedEngine(engine, cache)
            cache.close()

    # -- helpers ----------------------------------------------------------------------
    @staticmethod
    def steady(engine: Engine) -> dict[str, Any]:
        """Parameters under which the engine renders the same samples every time."""
        return dict(engine.deterministic_params)

    @staticmethod
    def can_repeat(engine: Engine) -> bool:
        """Whether some parameters make its renders repeat (for comparing paths)."""
        return engine.determinism in ("deterministic", "seeded") or bool(
            engine.deterministic_params)

    @staticmethod
    def request(engine: Engine, text: str, **fields: Any) -> SynthesisRequest:
        seed = 7 if engine.determinism == "seeded" else None
        fields.setdefault("params", EngineContract.steady(engine))
        return SynthesisRequest(text, seed=seed, **fields)

    @staticmethod
    def render(cached: CachedEngine, request: SynthesisRequest) -> list[Audio]:
        return list(cached.engine.render(cached.resolve(request)))

    # -- what it says of itself ---------------------------------------------------------
    def test_it_describes_itself(self, engine: Engine) -> None:
        assert isinstance(engine.id, str) and engine.id
        assert isinstance(engine.model_revision, str) and engine.model_revision
        assert isinstance(engine.sample_rate, int) and engine.sample_rate > 0
        assert engine.default_language in engine.languages
        assert engine.determinism in DETERMINISM
        assert set(engine.deterministic_params) <= set(engine.params)
        if engine.default_voice is not None:
            assert engine.default_voice in engine.voices.values()
        for spec in engine.params.values():
            if spec.minimum is not None and isinstance(spec.default, int | float):
                assert spec.default >= spec.minimum, spec.name
            if spec.maximum is not None and isinstance(spec.default, int | float):
                assert spec.default <= spec.maximum, spec.name
        if engine.tensor_voice is not None:
            assert all(isinstance(n, int) and n > 0 for n in engine.tensor_voice.shape)
        json.dumps(engine.describe())
        assert engine.segment_gap >= 0

    # -- splitting --------------------------------------------------------------------
    def test_split_agrees_with_render(self, cached: CachedEngine) -> None:
        engine = cached.engine
        for text in _texts(engine):
            parts = engine.split_sentences(text)
            if parts is None:
                continue  # the declared fallback: requests stay whole
            assert parts and all(p.strip() == p and p for p in parts), parts
            assert "".join(p for p in parts) == "".join(text.split()) or (
                "".join("".join(p.split()) for p in parts) == "".join(text.split())), (
                "the parts are not the text")
            for part in parts:
                assert engine.split_sentences(part) in (None, [part]), f"{part!r} splits again"
            chunks = self.render(cached, self.request(engine, text))
            assert len(chunks) == len(parts), (
                f"{len(chunks)} chunks for the {len(parts)} parts of {text!r}")
            if engine.segments_context_free and self.can_repeat(engine):
                for part, chunk in zip(parts, chunks, strict=True):
                    alone = self.render(cached, self.request(engine, part))
                    assert Audio.join(alone).pcm == chunk.pcm, (
                        f"{part!r} alone is not its chunk of the whole")

    def test_clause_segments_only_where_declared(self, cached: CachedEngine) -> None:
        """``segments = "clauses"`` is refused unless the engine declares ``clause_safe``;
        a declaring engine renders every clause alone as one chunk of its own split."""
        engine = cached.engine
        if not engine.clause_safe:
            with pytest.raises(UnsupportedFeature, match="clause"):
                CachedEngine(engine, cached.cache, segments="clauses")
            return
        assert engine.segments_context_free, "clause_safe needs context-free segments"
        language = engine.default_language.split("-")[0].lower()
        clauses = [c for s in engine.split_sentences(CLAUSE_TEXTS.get(
            language, CLAUSE_TEXTS["en"])) or [] for c in split_clauses(s)]
        assert len(clauses) > 1, "a declaring engine must say its sentences"
        for clause in clauses:
            assert engine.split_sentences(clause) in (None, [clause]), clause
            chunks = self.render(cached, self.request(engine, clause))
            assert len(chunks) == 1, f"{len(chunks)} chunks for the clause {clause!r}"

    def test_the_pause_between_sentences_is_in_the_take_on_every_path(
            self, engine: Engine, tmp_path: Path) -> None:
        if not self.can_repeat(engine):
            pytest.skip("no parameters make this engine's renders repeat")
        text = next((t for t in _texts(engine) if (engine.split_sentences(t) or [1]) and len(
            engine.split_sentences(t) or []) > 1), None)
        if text is None:
            pytest.skip("the engine does not split")
        takes = {}
        for n, (path, segments) in enumerate((("whole", False), ("stream()", False),
                                              ("stitched", True))):
            cache = Cache(tmp_path / f"c{n}")
            cached = CachedEngine(engine, cache, segments=segments)
            try:
                if path == "stitched":
                    for part in engine.split_sentences(text) or []:
                        cached.synthesize(self.request(engine, part))
                if path == "stream()":
                    takes[path] = b"".join(c.pcm for c in cached.stream(
                        self.request(engine, text)))
                else:
                    takes[path] = cached.synthesize(self.request(engine, text)).audio.pcm
            finally:
                cache.close()
        assert takes["whole"] == takes["stream()"] == takes["stitched"], {
            k: len(v) for k, v in takes.items()}
        parts = [Audio.join(self.render_alone(engine, part))
                 for part in engine.split_sentences(text) or []]
        rule = JoinRule(engine.segment_gap)
        assert Audio.join([rule(p) for p in parts]).pcm == takes["whole"], (
            "the take is not its sentences joined with the engine's pause")

    def render_alone(self, engine: Engine, text: str) -> list[Audio]:
        with tempfile.TemporaryDirectory() as folder:
            cache = Cache(Path(folder))
            try:
                return self.render(CachedEngine(engine, cache), self.request(engine, text))
            finally:
                cache.close()

    # -- the model revision -------------------------------------------------------------
    def test_the_model_revision_is_the_same_in_another_process(
            self, engine: Engine, load_spec: str | None) -> None:
        if load_spec is None:
            pytest.skip("the engine cannot be loaded by name")
        code = ("from voxcache.engines import load_engine; import sys; "
                f"print(load_engine({load_spec!r}).model_revision)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == engine.model_revision

    def test_a_changed_weight_or_voice_file_changes_the_model_revision(
            self, engine: Engine, variant_engine: Engine | None) -> None:
        if variant_engine is None:
            pytest.skip("no variant of this engine's files was given")
        assert variant_engine.model_revision != engine.model_revision

    # -- parameters -----------------------------------------------------------------------
    def test_declared_parameters_are_keyed_and_undeclared_ones_refused(
            self, cached: CachedEngine) -> None:
        engine = cached.engine
        text = _texts(engine)[0]
        base = cached.key_of(cached.resolve(SynthesisRequest(text)))
        for spec in engine.params.values():
            other = _another_value(spec)
            if other is None:
                continue
            key = cached.key_of(cached.resolve(SynthesisRequest(text, params={
                spec.name: other})))
            assert (key != base) == spec.shapes_waveform, spec.name
        with pytest.raises(RequestError):
            cached.resolve(SynthesisRequest(text, params={"no_such_parameter_xyz": 1}))

    # -- determinism -------------------------------------------------------------------
    def test_it_is_as_deterministic_as_it_declares(self, cached: CachedEngine) -> None:
        engine = cached.engine
        if not self.can_repeat(engine):
            pytest.skip("a sampling engine with no deterministic parameters promises nothing")
        text = _texts(engine)[0]
        first = Audio.join(self.render(cached, self.request(engine, text))).pcm
        again = Audio.join(self.render(cached, self.request(engine, text))).pcm
        assert first == again, f"{engine.determinism}: two renders differ"
        if engine.determinism == "seeded":
            assert engine.supports_seed

    # -- concurrency ------------------------------------------------------------------
    def test_renders_at_once_are_safe_or_run_one_at_a_time(self, cached: CachedEngine) -> None:
        engine = cached.engine
        texts = [f"{t} {n}" for n, t in enumerate(_texts(engine) * 2)]
        alone = {t: Audio.join(self.render(cached, self.request(engine, t))).pcm
                 for t in texts} if self.can_repeat(engine) else {}
        running, peak, lock = [0], [0], threading.Lock()
        real = engine.render

        def watched(request: Any) -> Iterator[Audio]:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            try:
                time.sleep(0.05)
                yield from real(request)
            finally:
                with lock:
                    running[0] -= 1

        together: dict[str, bytes] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(len(texts))

        def one(text: str) -> None:
            try:
                start.wait()
                together[text] = Audio.join(list(cached.render(cached.resolve(
                    self.request(engine, text))))).pcm
            except BaseException as exc:  # collected and checked below
                errors.append(exc)

        engine.render = watched  # type: ignore[method-assign]
        try:
            threads = [threading.Thread(target=one, args=(t,)) for t in texts]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(300)
        finally:
            del engine.render
        assert errors == []
        if not engine.concurrent_renders:
            assert peak[0] == 1, "renders ran at once for an engine that declares them unsafe"
        for text, pcm in alone.items():
            assert together[text] == pcm, f"{text!r} rendered at once differs"

    # -- what text can be ------------------------------------------------------------
    def test_empty_and_silent_text(self, cached: CachedEngine) -> None:
        engine = cached.engine
        with pytest.raises(RequestError):
            cached.resolve(SynthesisRequest(""))
        for text in ("...", "!", "Hello. . World."):
            try:
                chunks = list(cached.render(cached.resolve(self.request(engine, text))))
            except (EngineError, RequestError):
                continue  # a clear refusal is a promise kept
            assert chunks, f"{text!r}: no audio and no error"
            parts = engine.split_sentences(text)
            if parts is not None:
                assert len(parts) == len(chunks), f"{text!r}: split and render disagree"

    def test_long_and_unicode_text(self, cached: CachedEngine) -> None:
        engine = cached.engine
        long_text = " ".join(_texts(engine) * 8)
        chunks = self.render(cached, self.request(engine, long_text))
        assert chunks
        language = engine.default_language.split("-")[0].lower()
        text = UNICODE.get(language, UNICODE["en"])
        with contextlib.suppress(EngineError, RequestError):  # a clear refusal is acceptable
            assert self.render(cached, self.request(engine, text))
        nfd = unicodedata.normalize("NFD", text)
        assert cached.key_of(cached.resolve(SynthesisRequest(nfd))) == cached.key_of(
            cached.resolve(SynthesisRequest(text)))

    def test_every_chunk_is_canonical_pcm(self, cached: CachedEngine) -> None:
        engine = cached.engine
        for chunk in self.render(cached, self.request(engine, _texts(engine)[0])):
            assert isinstance(chunk, Audio)
            assert chunk.sample_rate == engine.sample_rate
            assert chunk.channels >= 1 and len(chunk.pcm) % (2 * chunk.channels) == 0
            assert chunk.pcm, "an empty chunk"


def _another_value(spec: Any) -> Any:
    """A valid value of a declared parameter other than its default (None: none found)."""
    default = spec.default
    if spec.type == "bool":
        return not default
    if spec.type in ("int", "float"):
        cast = int if spec.type == "int" else float
        for candidate in (default + 1, default - 1, default * 0.5 if default else 0.5):
            value = cast(candidate)
            if value != default and (spec.minimum is None or value >= spec.minimum) and (
                    spec.maximum is None or value <= spec.maximum):
                return value
        return None
    choices = getattr(spec, "choices", None)
    if choices:
        return next((c for c in choices if c != default), None)
    return None
