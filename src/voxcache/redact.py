"""Scrub a foreign error text before a client sees it: tracebacks, absolute paths, addresses.

An engine's exception or an upstream server's error body is worth passing on for its
*reason* ("No such file or directory", "CUDA out of memory"), but such texts also carry
the server's insides: GPT-SoVITS puts a whole traceback and its install folder in its
``Exception`` field, libraries name the Python object they failed on
(``<_io.BytesIO object at 0x7f…>``). A client gets the reason and the file's name; the
folders, frames and memory addresses stay in the server's log.
"""

from __future__ import annotations

import re

_TRACEBACK_HEAD = re.compile(r"Traceback \(most recent call last\):[ \t]*\n?")
_FRAME_LINE = re.compile(r"^[ \t]+.*(?:\n|$)", re.MULTILINE)
_CHAIN_NOTE = re.compile(r"(?:During handling of the above exception, another exception "
                         r"occurred|The above exception was the direct cause of the following "
                         r"exception):?")
_FRAME = re.compile(r"File \"[^\"]*\", line \d+(?:, in [^\s,]+)?,?")
_ADDRESS = re.compile(r"(<[^<>\s][^<>]*?) at 0x[0-9A-Fa-f]+>")
_QUOTED_PATH = re.compile(r"(['\"])((?:[A-Za-z]:[\\/]|\\\\|/)[^'\"\n]*)\1")
_POSIX_PATH = re.compile(r"(?<![\w.~:/\\-])/(?:[^\s/'\"<>:;,()\[\]{}|]+/)+"
                         r"[^\s/'\"<>:;,()\[\]{}|]*")
_WINDOWS_PATH = re.compile(r"(?<![\w\\])(?:[A-Za-z]:|\\\\[^\s\\/'\"]+)[\\/]"
                           r"(?:[^\s\\/'\"<>|:*?]+[\\/])*[^\s\\/'\"<>|:*?]*")
_FILE_URL = re.compile(r"file://(?=/)")


def redact(text: str) -> str:
    """``text`` on one line, without traceback frames, absolute paths (each keeps its file
    name: ``…/ref.wav``) or object addresses."""
    text = _drop_tracebacks(text)
    text = _ADDRESS.sub(r"\1>", text)
    text = _FILE_URL.sub("", text)
    text = _QUOTED_PATH.sub(lambda m: m.group(1) + _short(m.group(2)) + m.group(1), text)
    text = _WINDOWS_PATH.sub(lambda m: _short(m.group()), text)
    text = _POSIX_PATH.sub(lambda m: _short(m.group()), text)
    return " ".join(text.split())


def _drop_tracebacks(text: str) -> str:
    """Keep what a traceback concludes (its last line, the exception) and drop its frames."""
    while (head := _TRACEBACK_HEAD.search(text)) is not None:
        rest = _FRAME_LINE.sub("", text[head.end():], count=0)
        text = text[:head.start()] + rest
    text = _CHAIN_NOTE.sub(" ", text)
    return _FRAME.sub(" ", text)


def _short(path: str) -> str:
    """An absolute path cut to its last part: the file a message is about, not where it lives."""
    name = re.split(r"[\\/]", path.rstrip("\\/"))[-1]
    return f"…/{name}" if name else "…/"
