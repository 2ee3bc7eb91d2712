"""Keep API keys out of the access log.

The Office add-in's files are fetched with ``?key=...`` (Office cannot send headers for them),
and uvicorn's access log writes every request's query string in clear. A filter on the
``uvicorn.access`` logger replaces secret query values before any handler formats them.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

#: query parameters whose values are secrets
SECRET_PARAMS = ("key", "api_key", "token")
#: a query parameter as the log writes it: its name as sent (perhaps percent-encoded) and value
_PARAM = re.compile(r"([?&])([^=&#\s]+)=([^&#\s]*)")


def redact(text: str) -> str:
    """``text`` with the values of secret query parameters replaced by ``***``, their names
    compared as the server reads them (decoded: ``%6Bey`` is ``key``).

    >>> redact("/addin/manifest.xml?key=s3cret&x=1")
    '/addin/manifest.xml?key=***&x=1'
    >>> redact("/addin/functions.js?%6Bey=s3cret")
    '/addin/functions.js?%6Bey=***'
    """
    def hide(m: re.Match) -> str:
        secret = unquote_plus(m.group(2)).lower() in SECRET_PARAMS
        return f"{m.group(1)}{m.group(2)}={'***' if secret else m.group(3)}"

    return _PARAM.sub(hide, text)


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
