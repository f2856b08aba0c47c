"""Piper, the tone engine and a plugin engine packaged outside src/ pass the engine contract.

The plugin (``tests/plugins/voxcache-styletone``, its own small distribution installed in the
test environment) is loaded only through the ``voxcache.engines`` entry point, as a
third-party engine is.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from voxcache.engine import Engine
from voxcache.engines import load_engine
from voxcache.engines.tone import ToneEngine
from voxcache.testing.engine_contract import EngineContract


class TestTone(EngineContract):
    @pytest.fixture
    def engine(self) -> Engine:
        return ToneEngine()

    @pytest.fixture
    def load_spec(self) -> str:
        return "tone"

    @pytest.fixture
    def variant_engine(self) -> Engine:
        return ToneEngine(model_revision="tone-2")


@pytest.mark.piper
class TestPiper(EngineContract):
    @pytest.fixture
    def engine(self, piper) -> Engine:
        return piper

    @pytest.fixture
    def load_spec(self) -> str:
        return "voxcache.engines.piper:PiperEngine"

    @pytest.fixture
    def variant_engine(self, piper, tmp_path: Path) -> Engine:
        """The bundled voice with its config changed by one value (a retrained voice's
        config differs the same way): another model revision."""
        from voxcache.engines.piper import PiperEngine

        model = tmp_path / piper.model_path.name
        shutil.copy(piper.model_path, model)
        config = json.loads(Path(f"{piper.model_path}.json").read_text(encoding="utf-8"))
        config["inference"]["noise_scale"] = 0.5
        Path(f"{model}.json").write_text(json.dumps(config), encoding="utf-8")
        return PiperEngine(threads=2, model_path=model)


class TestPluginEngine(EngineContract):
    @pytest.fixture
    def engine(self) -> Engine:
        return load_engine("styletone")

    @pytest.fixture
    def load_spec(self) -> str:
        return "styletone"

    @pytest.fixture
    def variant_engine(self, tmp_path: Path) -> Engine:
        from voxcache_styletone import default_voices

        voices = tmp_path / "voices.json"
        table = default_voices()
        table["aria"][0] += 0.001  # one value of one voice's style vector changed
        voices.write_text(json.dumps(table), encoding="utf-8")
        return load_engine("styletone", voices=str(voices))
