"""A small GPT-style decoder with a KV cache: the session-state mechanism on a real model.

No engine here keeps state across turns, so the mechanism is shown on a seeded torch
transformer whose ``forward`` takes new tokens plus the keys/values read before, as an
engine's ``past_key_values``. float64, so a context read in one piece or two gives the same
logits bit for bit (``Conversation`` checks it). A test bed (tests/stages, bench/probes/stages.py),
not an engine; needs torch (extra ``[embeddings]``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import MissingDependency
from .keys import DEFAULT_TENANT
from .sessions import VOICE_PREFIX, SessionStates

try:
    import torch
    from torch import nn
    from torch.nn import functional
except ImportError:  # pragma: no cover - exercised only without the extra
    raise MissingDependency("the tiny decoder needs torch: pip install 'voxcache[embeddings]'"
                            ) from None

Past = list[tuple["torch.Tensor", "torch.Tensor"]]


class _Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                 nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        new, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(new, self.heads, -1).transpose(0, 1) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=1)
            v = torch.cat([past[1], v], dim=1)
        seen = k.shape[1] - new
        # position i of the new tokens sees everything before it: seen + i + 1 keys
        allowed = torch.ones(new, k.shape[1], dtype=torch.bool).tril(diagonal=seen)
        attended = functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        x = x + self.proj(attended.transpose(0, 1).reshape(new, width))
        return x + self.mlp(self.norm2(x)), (k, v)


class TinyDecoder(nn.Module):
    """A causal transformer over a 320-token vocabulary (256 bytes of text + 64 "speech"
    tokens), initialised from ``seed``."""

    def __init__(self, *, width: int = 256, layers: int = 4, heads: int = 4,
                 vocab: int = 320, max_positions: int = 4096, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(max_positions, width)
        self.blocks = nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.double().eval()
        self.revision = f"tiny-decoder-w{width}-l{layers}-h{heads}-seed{seed}"

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor, past: Past | None = None
                ) -> tuple[torch.Tensor, Past]:
        """Logits for ``tokens`` read after ``past`` (keys/values per layer)."""
        start = 0 if not past else past[0][0].shape[1]
        positions = torch.arange(start, start + tokens.shape[0])
        x = self.embed(tokens) + self.position(positions)
        kept: Past = []
        for index, block in enumerate(self.blocks):
            x, state = block(x, past[index] if past else None)
            kept.append(state)
        return self.head(self.norm(x)), kept

    def generate(self, context: Sequence[int], count: int, past: Past | None = None
                 ) -> tuple[list[int], Past]:
        """Read ``context`` after ``past``, then greedily generate ``count`` tokens; return
        them and the state after all of it (the generated tokens included)."""
        logits, past = self(torch.tensor(list(context), dtype=torch.long), past)
        out: list[int] = []
        token = int(logits[-1].argmax())
        for _ in range(count):
            out.append(token)
            logits, past = self(torch.tensor([token]), past)
            token = int(logits[-1].argmax())
        return out, past


def state_to_arrays(past: Past) -> dict[str, np.ndarray]:
    """Keys/values as named numpy arrays (what a session entry stores)."""
    arrays: dict[str, np.ndarray] = {}
    for index, (k, v) in enumerate(past):
        arrays[f"k{index}"] = k.numpy()
        arrays[f"v{index}"] = v.numpy()
    return arrays


def arrays_to_state(arrays: dict[str, np.ndarray]) -> Past:
    """The inverse of ``state_to_arrays``."""
    layers = len(arrays) // 2
    return [(torch.from_numpy(np.array(arrays[f"k{i}"])),
             torch.from_numpy(np.array(arrays[f"v{i}"]))) for i in range(layers)]


def text_tokens(text: str) -> list[int]:
    """Byte-level tokens of a turn's text."""
    return list(text.encode())


@dataclass
class Conversation:
    """One session: turns of text in, a fixed number of generated tokens out per turn."""

    model: TinyDecoder
    states: SessionStates | None
    """Where state is kept between turns; None runs every turn from scratch."""
    session_id: str
    voice_tokens: list[int]
    voice: str = ""
    tenant: str = DEFAULT_TENANT
    per_turn: int = 32
    turns: list[str] = field(default_factory=list)
    history: list[int] = field(default_factory=list)
    """Every token read or generated so far (what a stateless engine must read again)."""
    reused: list[str] = field(default_factory=list)
    """Per turn: ``session``, ``voice`` or ``none`` — which kept state it started from."""
    read: list[int] = field(default_factory=list)
    """Per turn: positions the model read before generating (the prefill it paid for)."""
    _prefix_read: int = 0

    def say(self, text: str) -> tuple[list[int], float]:
        """Generate the next turn's tokens; return them and the seconds it took."""
        started = time.perf_counter()
        tokens = text_tokens(text)
        past, context, reused = self._starting_point(tokens)
        self.read.append(len(context) + self._prefix_read)
        self._prefix_read = 0
        generated, past = self.model.generate(context, self.per_turn, past)
        seconds = time.perf_counter() - started
        if not self.history:
            self.history = list(self.voice_tokens)
        self.history += tokens + generated
        self.turns.append(text)
        self.reused.append(reused)
        if self.states is not None:
            self.states.keep(self.session_id, self.turns, state_to_arrays(past),
                             voice=self.voice, tenant=self.tenant, compute_seconds=seconds)
        return generated, seconds

    def _starting_point(self, tokens: list[int]) -> tuple[Past | None, list[int], str]:
        """The kept state to continue from and what is left to read."""
        if self.states is not None and self.turns:
            kept = self.states.lookup(self.session_id, self.turns, voice=self.voice,
                                      tenant=self.tenant)
            if kept is not None:
                return arrays_to_state(dict(kept.artifact.tensors)), tokens, "session"
        if self.states is not None and not self.turns:
            return self._voice_prefix(), tokens, "voice"
        history = self.history or list(self.voice_tokens)
        return None, history + tokens, "none"

    def _voice_prefix(self) -> Past:
        """The voice prompt's state: kept once per voice, shared by every session."""
        assert self.states is not None
        chain = [self.voice_tokens]
        kept = self.states.lookup(VOICE_PREFIX, chain, voice=self.voice, tenant=self.tenant)
        if kept is not None:
            return arrays_to_state(dict(kept.artifact.tensors))
        started = time.perf_counter()
        _, past = self.model(torch.tensor(self.voice_tokens, dtype=torch.long))
        self._prefix_read = len(self.voice_tokens)  # paid once per voice, by its first turn
        self.states.keep(VOICE_PREFIX, chain, state_to_arrays(past), voice=self.voice,
                         tenant=self.tenant, compute_seconds=time.perf_counter() - started)
        return past
