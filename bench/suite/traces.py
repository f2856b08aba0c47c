"""Synthetic request traces with the popularity TTS operators report, and one mixing kinds.

An item is one stored artifact (a phrase/voice/instruct take, an embedding, an encoded
delivery) with its size in bytes and the engine seconds a miss costs. For the speech traces
both follow from the item's length in characters (the audio per character and Piper's seconds
per character are measured, not guessed: ``SpeechCost``). Times matter because voxcache's
earlier eviction score mixed recency in seconds with frequency, so every trace spreads its
requests over real-looking hours; the traces say how.

- ``skewed``, ``zipf``, ``with_scan``: static popularity (the first two) and a one-off batch job
  passing through it. Under static popularity perfect LFU is the online limit.
- ``shifting``: a week of a chain's announcements — greetings and service phrases asked all
  week (the head is ``examples/hot_phrases.json``), new campaign phrases each morning
  that are hot for a day or two and then fade, and one-off answers (``design.md``: "pure LFU
  never forgets yesterday's campaign"; ``research/tts_caches.md``: openHAB caps cached text at
  150 characters because one-off LLM answers "clog the LRU cache").
- ``cost_mixed``: the kinds a voice-cloning service stores side by side, of very different
  size and cost (``design.md``, "What is cached"): audio takes of 100 KB–5 MB costing 0.3–3 s of
  engine time, speaker embeddings of ~1 KB costing ~0.8 s each, and encoded deliveries (mp3 of
  a take) that cost tens to hundreds of milliseconds of CPU to re-derive.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..helpers.fixtures import HOT_PHRASES

DAY = 86_400.0
HOUR = 3_600.0
AUDIO_BYTES_PER_CHAR = 2_070
"""16-bit PCM at 22.05 kHz: Piper's joe-medium speaks ~0.047 s per character."""

OPEN_HOURS = (7.0, 23.0)
"""A store's day: announcements between 07:00 and 23:00, none at night."""


@dataclass(frozen=True)
class SpeechCost:
    """Engine seconds of one take from its length: ``fixed + per_char × chars`` (Piper's fit)."""

    fixed: float = 0.162
    per_char: float = 0.0054

    def __call__(self, chars: np.ndarray) -> np.ndarray:
        return self.fixed + self.per_char * chars


@dataclass(frozen=True)
class Trace:
    """Requests (item ids and times) and what each item weighs and costs."""

    name: str
    items: np.ndarray
    times: np.ndarray
    sizes: np.ndarray
    seconds: np.ndarray
    """Engine seconds a miss of each item costs (what a hit saves)."""
    kinds: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))
    """The artifact kind of each item (``audio`` unless the trace mixes kinds)."""

    @property
    def working_set_bytes(self) -> int:
        """Bytes of every distinct item the trace asks for (what an infinite cache holds)."""
        return int(self.sizes[np.unique(self.items)].sum())

    def kind_of(self, item: int) -> str:
        """The kind of one item."""
        return str(self.kinds[item]) if len(self.kinds) else "audio"


def catalog(n_items: int, rng: np.random.Generator, median: float = 60,
            sigma: float = 0.8) -> np.ndarray:
    """Characters per item: short prompts to long paragraphs (log-normal, median ~60)."""
    return np.clip(rng.lognormal(np.log(median), sigma, n_items), 8, 1_500).astype(np.int64)


def _speech(name: str, items: np.ndarray, times: np.ndarray, chars: np.ndarray,
            cost: SpeechCost, bytes_per_char: int) -> Trace:
    return Trace(name, items.astype(np.int64), times, chars * bytes_per_char, cost(chars))


def _one_day(n: int) -> np.ndarray:
    return np.linspace(0.0, DAY, n, endpoint=False)


def skewed(n_events: int, n_items: int, seed: int = 1, hot_share: float = 0.15,
           hot_traffic: float = 0.70, cost: SpeechCost = SpeechCost(),
           bytes_per_char: int = AUDIO_BYTES_PER_CHAR) -> Trace:
    """70% of requests on 15% of the combinations, uniform within each group, over a day."""
    rng = np.random.default_rng(seed)
    chars = catalog(n_items, rng)
    n_hot = max(1, int(n_items * hot_share))
    hot = rng.random(n_events) < hot_traffic
    items = np.where(hot, rng.integers(0, n_hot, n_events),
                     rng.integers(n_hot, n_items, n_events))
    order = rng.permutation(n_items)  # so that hot items have random lengths
    return _speech("70/15 skew", order[items], _one_day(n_events), chars, cost, bytes_per_char)


def zipf(n_events: int, n_items: int, alpha: float = 0.9, seed: int = 2,
         cost: SpeechCost = SpeechCost(), bytes_per_char: int = AUDIO_BYTES_PER_CHAR) -> Trace:
    """Pure Zipf popularity over the catalogue (rank r asked ∝ 1/r^alpha), over a day."""
    rng = np.random.default_rng(seed)
    chars = catalog(n_items, rng)
    items = rng.choice(n_items, size=n_events, p=_zipf_weights(n_items, alpha))
    return _speech(f"Zipf α={alpha}", rng.permutation(n_items)[items], _one_day(n_events),
                   chars, cost, bytes_per_char)


def with_scan(base: Trace, share: float = 0.5, seed: int = 3, cost: SpeechCost = SpeechCost(),
              bytes_per_char: int = AUDIO_BYTES_PER_CHAR) -> Trace:
    """The skewed trace with a one-off scan: in its middle third, ``share`` of the requests
    are unique sentences asked once (a batch job reading a book aloud)."""
    rng = np.random.default_rng(seed)
    items = base.items.copy()
    n = len(items)
    lo, hi = n // 3, 2 * n // 3
    scan = np.flatnonzero(rng.random(hi - lo) < share) + lo
    first_new = len(base.sizes)
    items[scan] = np.arange(first_new, first_new + len(scan))
    chars = np.concatenate([base.sizes // bytes_per_char, catalog(len(scan), rng)])
    return _speech(f"{base.name} + one-off scan", items, base.times, chars, cost,
                   bytes_per_char)


def shifting(n_events: int, days: int = 7, seed: int = 5, cost: SpeechCost = SpeechCost(),
             bytes_per_char: int = AUDIO_BYTES_PER_CHAR,
             phrases: Path = HOT_PHRASES) -> Trace:
    """A week of a store chain's announcements, popularity shifting every day.

    - 30% **stable phrases**, the same all week: Zipf (α = 0.9) over greetings and service
      lines in four store voices; its head is ``hot_phrases.json`` (the English lines, their
      real lengths), its tail store-specific lines (one per 200 requests of the week).
    - 50% **campaigns**: each morning (07:00–10:00) the day's specials and promotions of the
      chain's stores launch (one new phrase per 100 requests of the week, 30% of its requests
      in a second voice); a phrase's pull starts at a Zipf weight (α = 0.8) within its day's
      batch and halves every 6 hours, so it is hot for a day and then fades — yesterday's
      campaign is what pure LFU cannot forget.
    - 20% **one-offs**: sentences asked once (an LLM's answers, a custom message), longer than
      the announcements (median 120 characters).

    Requests arrive uniformly within opening hours (07:00–23:00) on every day.
    """
    rng = np.random.default_rng(seed)
    times = _opening_hours(n_events, days, rng)
    kind = rng.choice(3, size=n_events, p=(0.30, 0.50, 0.20))
    items = np.empty(n_events, dtype=np.int64)

    head = _english_phrase_lengths(phrases)
    voices = 4
    n_tail = max(50, n_events // 200)
    stable_chars = np.concatenate([np.tile(head, voices), catalog(n_tail, rng)])
    n_stable = len(stable_chars)
    stable = kind == 0
    items[stable] = rng.choice(n_stable, size=int(stable.sum()),
                               p=_zipf_weights(n_stable, 0.9))

    per_day = max(10, n_events // 100 // days)
    n_campaigns = per_day * days
    launch = (np.repeat(np.arange(days), per_day) * DAY
              + (OPEN_HOURS[0] + rng.random(n_campaigns) * 3) * HOUR)
    pull = np.tile(_zipf_weights(per_day, 0.8), days)
    campaign_chars = catalog(n_campaigns, rng, median=80, sigma=0.5)
    campaign_rows = np.flatnonzero(kind == 1)
    second_voice = rng.random(len(campaign_rows)) < 0.3  # the same text in another voice
    items[campaign_rows] = (n_stable + n_campaigns * second_voice + _decaying_choice(
        times[campaign_rows], launch, pull, half_life=6 * HOUR, rng=rng))
    campaign_chars = np.concatenate([campaign_chars, campaign_chars])

    one_offs = np.flatnonzero(kind == 2)
    first = n_stable + 2 * n_campaigns
    items[one_offs] = first + np.arange(len(one_offs))
    chars = np.concatenate([stable_chars, campaign_chars,
                            catalog(len(one_offs), rng, median=120, sigma=0.6)])
    order = np.argsort(times, kind="stable")
    return _speech("shifting campaigns (7 days)", items[order], times[order], chars, cost,
                   bytes_per_char)


def cost_mixed(n_events: int, seed: int = 6) -> Trace:
    """A voice-cloning service's day: three kinds, sizes over four orders of magnitude.

    - 50% **audio takes** (Zipf α = 0.8 over one take per 20 requests): log-normal sizes,
      median 400 KB, clipped to 100 KB–5 MB (2.3–119 s of 22.05 kHz speech); engine time
      0.25 s + 0.55 s per MB, i.e. 0.3–3 s (a GPU voice-cloning model: fixed start-up plus a
      real-time factor well under one).
    - 30% **encoded deliveries**: an mp3 of a take (OpenAI clients' default format), asked
      with the takes' own popularity; 12% of the take's size and re-derived from the PCM in
      0.24 s per MB of PCM (``voxcache.encoded.encode`` to mp3 measured here: 34 ms for 2 s
      of speech, 1.15 s for 110 s; size 11.5–12.6% of the PCM), i.e. 26 ms–1.2 s.
    - 20% **speaker embeddings**: Zipf α = 1.0 over one voice per 100 requests (a few house
      voices, many uploaded voices used a handful of times); 1,024–1,100 bytes (a 192-float
      vector and its envelope), 0.6–1.0 s each (load and resample the reference clip, run
      the speaker encoder).

    Requests are spread evenly over one day, the kinds interleaved at random.
    """
    rng = np.random.default_rng(seed)
    n_audio, n_voices = max(20, n_events // 20), max(10, n_events // 100)
    audio_bytes = np.clip(rng.lognormal(np.log(400e3), 0.9, n_audio), 100e3, 5e6)
    audio_bytes = audio_bytes.astype(np.int64)
    audio_seconds = 0.25 + 0.55 * audio_bytes / 1e6
    encoded_bytes = (audio_bytes * 0.12).astype(np.int64)
    encoded_seconds = 0.002 + 0.24 * audio_bytes / 1e6
    embedding_bytes = rng.integers(1_024, 1_100, n_voices)
    embedding_seconds = rng.uniform(0.6, 1.0, n_voices)

    kind = rng.choice(3, size=n_events, p=(0.5, 0.3, 0.2))
    takes = rng.permutation(n_audio)[rng.choice(n_audio, size=n_events,
                                                p=_zipf_weights(n_audio, 0.8))]
    voices = rng.permutation(n_voices)[rng.choice(n_voices, size=n_events,
                                                  p=_zipf_weights(n_voices, 1.0))]
    items = np.where(kind == 0, takes, np.where(kind == 1, n_audio + takes,
                                                2 * n_audio + voices))
    sizes = np.concatenate([audio_bytes, encoded_bytes, embedding_bytes])
    seconds = np.concatenate([audio_seconds, encoded_seconds, embedding_seconds])
    kinds = np.array(["audio"] * n_audio + ["encoded"] * n_audio + ["embedding"] * n_voices,
                     dtype=object)
    return Trace("cost-mixed kinds", items.astype(np.int64), _one_day(n_events),
                 sizes.astype(np.int64), seconds, kinds)


def _zipf_weights(n: int, alpha: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, n + 1) ** alpha
    return weights / weights.sum()


def _opening_hours(n: int, days: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` sorted times, uniform within opening hours on each of ``days`` days."""
    open_seconds = (OPEN_HOURS[1] - OPEN_HOURS[0]) * HOUR
    offsets = np.sort(rng.random(n)) * days * open_seconds
    day = np.floor(offsets / open_seconds)
    return day * DAY + OPEN_HOURS[0] * HOUR + (offsets - day * open_seconds)


def _decaying_choice(times: np.ndarray, launch: np.ndarray, pull: np.ndarray,
                     half_life: float, rng: np.random.Generator) -> np.ndarray:
    """For each request time, a campaign launched before it, chosen ∝ pull × 2^(−age/half_life).

    Sampled hour by hour (weights change little within an hour): one probability vector per
    hour, not per request.
    """
    chosen = np.empty(len(times), dtype=np.int64)
    hours = np.floor(times / HOUR)
    for hour in np.unique(hours):
        rows = np.flatnonzero(hours == hour)
        at = (hour + 0.5) * HOUR
        age = at - launch
        weights = np.where(age >= 0, pull * 0.5 ** (np.maximum(age, 0) / half_life), 0.0)
        if weights.sum() == 0:  # before the first launch: the first batch's opening
            weights = np.where(launch == launch.min(), pull, 0.0)
        chosen[rows] = rng.choice(len(launch), size=len(rows), p=weights / weights.sum())
    return chosen


def _english_phrase_lengths(path: Path) -> np.ndarray:
    """Characters of the English lines of ``hot_phrases.json`` (the bundled voice is
    English); a stand-in set of typical lengths when the file is not there."""
    try:
        lines = json.loads(path.read_text())["phrases"]
    except (OSError, ValueError, KeyError):
        return np.array([53, 44, 54, 51, 53, 81, 55, 59, 88, 50], dtype=np.int64)
    return np.array([len(p["text"]) for p in lines if p.get("language", "en") == "en"],
                    dtype=np.int64)


def next_use(items: np.ndarray) -> np.ndarray:
    """For each request, the index of the next request for the same item (or ``len``)."""
    n = len(items)
    order = np.argsort(items, kind="stable")
    out = np.full(n, n, dtype=np.int64)
    same = items[order[1:]] == items[order[:-1]]
    out[order[:-1][same]] = order[1:][same]
    return out
