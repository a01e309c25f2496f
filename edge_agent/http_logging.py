"""Refused malformed HTTP is logged as one INFO line, not an aiohttp traceback at ERROR.

aiohttp answers a request it cannot parse (a NUL byte in a header, a line too long, a bad
method after the first request) with 400 and logs "Error handling request" with the whole
traceback at ERROR on ``aiohttp.server``. On a hostile LAN that is noise an operator would
read as a fault of ours; the refusal itself is correct, so it is demoted here.
"""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import HttpProcessingError

_LOGGER = "aiohttp.server"


class _QuietBadRequests(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.levelno, record.levelname = logging.INFO, "INFO"
            why = " ".join(str(exc.message).split())  # aiohttp's message spans lines
            record.msg = f"{record.msg}: refused malformed HTTP ({exc.code}: {why})"
            record.exc_info, record.exc_text = None, None
        return True


_FILTER = _QuietBadRequests()


def quiet_bad_requests() -> None:
    """Install the filter on aiohttp's server logger (idempotent)."""
    logger = logging.getLogger(_LOGGER)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
