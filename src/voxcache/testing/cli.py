"""One-shot ``voxcache`` commands run inside the test's own process: the real parser,
handlers and exit codes, without a new interpreter's ~0.4 CPU-seconds of imports each.
Commands that outlive their call (``serve``, a pull ``--every``) still need a process.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence

from ..logs import stderr_handler
from .servers import clean_env


def run_cli(args: Sequence[str], env: Mapping[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """``voxcache ARGS`` as a process started with ``env`` would run it (``None``: this
    process's environment without ``VOXCACHE_*``): its exit code, stdout and stderr (log
    lines included, as a process's would be)."""
    from ..cli import main

    out, err = _stream(), _stream()
    with _environment(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            _logs_to(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's refusals, --help, --version
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return subprocess.CompletedProcess(["voxcache", *args], code, _text(out), _text(err))


def _stream() -> io.TextIOWrapper:
    """A text stream with a ``buffer``, as sys.stdout has (audio is written to it)."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", "replace")


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    wanted = env if env is not None else clean_env()
    os.environ.clear()
    os.environ.update(wanted)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _logs_to(stream: io.TextIOWrapper) -> Iterator[None]:
    """voxcache's log lines to ``stream`` in the text format for the call: a process's
    configure() sends them to its stderr, but in a test harness whose root logger has
    handlers it leaves them be (and lowers the level for ``-v``: put back after)."""
    handler = stderr_handler(stream)
    logger = logging.getLogger("voxcache")
    level = logger.level
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
