"""What ``Engine.queued()`` returns: every relQuery in flight with its unfinished requests, as
the scheduler sees them (the estimates replay it: relserve/estimate/snapshot.py)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class QueuedRequest:
    """One request of a relQuery in flight."""

    prompt_ids: list[int]
    #: prompt (and recomputed) tokens with KV in the cache
    computed: int = 0
    #: answer tokens generated so far
    generated: int = 0
    #: admitted (prefilling or decoding); False: waiting
    running: bool = False


@dataclass(frozen=True)
class QueuedRelQuery:
    rel_id: str
    #: when it arrived, on ``time.monotonic()``'s clock
    arrival: float
    max_tokens: int
    call_key: str = ""
    tenant: str = ""
    priority: int = 0
    #: its rows are scored (one answer token per request)
    scored: bool = False
    requests: list[QueuedRequest] = field(default_factory=list)
    #: the prefix-cache namespace its prompts were sent in (a server tenant's ``cache_salt``;
    #: None: the shared one): the estimates hash its blocks in it (issue 63)
    cache_salt: str | None = None
