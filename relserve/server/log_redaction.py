"""Keep API keys out of the access log.

The Office add-in's files are fetched with ``?key=...`` (Office cannot send headers for them),
and uvicorn's access log writes every request's query string in clear. A filter on the
``uvicorn.access`` logger replaces secret query values before any handler formats them.
"""

from __future__ import annotations

import logging
import re

#: query parameters whose values are secrets
SECRET_PARAMS = ("key", "api_key", "token")
_SECRET = re.compile(r"(?i)([?&](?:" + "|".join(SECRET_PARAMS) + r")=)[^&#\s]*")


def redact(text: str) -> str:
    """``text`` with the values of secret query parameters replaced by ``***``.

    >>> redact("/addin/manifest.xml?key=s3cret&x=1")
    '/addin/manifest.xml?key=***&x=1'
    """
    return _SECRET.sub(r"\1***", text)


class RedactSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def install(logger_name: str = "uvicorn.access") -> None:
    """Add the filter to ``logger_name`` once (safe to call for every app)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactSecrets) for f in logger.filters):
        logger.addFilter(RedactSecrets())
