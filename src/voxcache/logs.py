"""How voxcache's processes log: a UTC timestamp on every line, as text or as JSON.

The library itself configures nothing (an application that imports it keeps its own
logging); the command line calls ``configure`` once, and ``voxcache serve`` hands the
same ``logging_config`` to uvicorn, which applies it in every ``--workers`` process
too, so uvicorn's own lines and voxcache's look alike. ``-v`` turns on DEBUG for
voxcache's loggers only: a library's DEBUG (botocore logs every request it signs)
stays at WARNING. ``log_format = "json"`` (``VOXCACHE_LOG_FORMAT``, ``--log-format``)
writes one JSON object per line for a log shipper.
"""

from __future__ import annotations

import json
import logging
import logging.config
import time
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")
"""What ``--log-format`` / ``log_format`` accept."""

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Utc(logging.Formatter):

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """ISO 8601 in UTC with milliseconds: ``2025-06-01T12:00:00.123Z`` (sorts as text)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


class TextFormatter(_Utc):
    """``2025-06-01T12:00:00.123Z INFO voxcache.serve: message``."""

    def __init__(self) -> None:
        super().__init__(_TEXT)


class JsonFormatter(_Utc):
    """One JSON object per line: time, level, logger, pid, message (and the traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"time": self.formatTime(record), "level": record.levelname,
                                "logger": record.name, "pid": record.process,
                                "message": record.getMessage()}
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def logging_config(log_format: str = "text", *, verbose: bool = False,
                   level: int = logging.WARNING) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` document: one stderr handler on the root logger,
    ``voxcache`` at ``level`` (DEBUG with ``verbose``), every other logger at WARNING, and
    uvicorn's loggers sent through the same handler."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")
    formatter = TextFormatter if log_format == "text" else JsonFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"voxcache": {"()": f"{__name__}.{formatter.__name__}"}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "voxcache",
                                "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": "WARNING"},
        "loggers": {
            "voxcache": {"level": logging.DEBUG if verbose else level},
            # uvicorn's own handlers would print without a timestamp: through ours instead
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
        },
    }


def configure(log_format: str = "text", *, verbose: bool = False,
              level: int = logging.WARNING) -> dict[str, Any]:
    """Apply ``logging_config`` to this process and return it (for uvicorn's workers).

    As ``logging.basicConfig`` does, it leaves a process whose root logger already has
    handlers (a test harness, an application calling ``voxcache.cli.main``) alone, except
    that it lowers voxcache's level when more was asked for (``-v``, ``serve``'s INFO)."""
    config = logging_config(log_format, verbose=verbose, level=level)
    if logging.getLogger().handlers:
        wanted = config["loggers"]["voxcache"]["level"]
        if wanted < logging.WARNING:
            logging.getLogger("voxcache").setLevel(wanted)
    else:
        logging.config.dictConfig(config)
    return config


def stderr_handler(stream: TextIO | None = None) -> logging.Handler:
    """A stderr handler (or ``stream``'s) in the text format, for a logger in a process
    nobody configured."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    return handler
