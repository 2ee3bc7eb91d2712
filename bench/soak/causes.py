"""Which cause an error message names. Every error a client records must fall under one of
these; a message none of them matches (an empty one, "no answer", a NULL nobody explained) is
reported as unexplained and fails the run's "every error names its cause" target."""

from __future__ import annotations

import re

#: (cause, pattern), first match wins; patterns are searched case-insensitively
CAUSES: tuple[tuple[str, str], ...] = (
    ("harness: dropped by the client", r"harness: the client disconnected"),
    ("client disconnected", r"the client disconnected"),
    ("cancelled by the client", r"^cancelled$|cancelled by the client|DELETE"),
    ("server stopping", r"the server is stopping"),
    ("engine died", r"engine's processes died|engine-dead|engine is dead"),
    ("tenant over its limit (429)", r"in flight|HTTP 429|\b429\b"),
    ("request too large (413)", r"too many (rows|cells|prompts)|HTTP 413|\b413\b"),
    ("bad formula", r"placeholder|argument|template"),
    ("statement timeout", r"statement timeout"),
    ("backend terminated", r"terminating connection due to administrator command|AdminShutdown|"
                           r"server closed the connection unexpectedly"),
    ("server unreachable", r"cannot reach|connection refused|connect(ion)? ?error|all connection attempts failed|"
                           r"could not connect|ConnectError"),
    ("server connection broke", r"stream .*broke|closed the stream|ended early|ended without|RemoteProtocolError|"
                                r"peer closed|incomplete chunked|connection to the relserve server failed|"
                                r"server disconnected|ReadError"),
    ("server unavailable (503)", r"HTTP 503|\b503\b"),
    ("budget exceeded", r"budget exceeded"),
    ("harness check failed", r"^harness: "),
)
_COMPILED = tuple((name, re.compile(p, re.IGNORECASE)) for name, p in CAUSES)
UNEXPLAINED = "unexplained"
#: causes that are the harness's own findings, never a named cause of the server's
FINDINGS = ("harness check failed", UNEXPLAINED)


def cause_of(message: str) -> str:
    if message and message.strip():
        for name, pattern in _COMPILED:
            if pattern.search(message):
                return name
    return UNEXPLAINED
