"""Tenants, their API keys and their limits, read from a TOML or JSON file.

A file looks like this (TOML; the JSON form has the same structure)::

    [limits]                      # defaults for every tenant (the values shown are the defaults)
    max_rows_in_flight = 10000    # engine rows a tenant may have unfinished (running or planning)
    max_rows_per_request = 10000  # rows (or cells, or prompts) in one request
    max_body_bytes = 8388608      # size of one request body
    max_template_chars = 32768    # template plus system message, in characters
    max_placeholders = 64         # placeholder occurrences in one template
    max_rendered_chars = 33554432 # every row's prompt of one request, summed, before rendering
    max_tokens_in_flight = 4000000  # prompt tokens (estimated) + max answer tokens, unfinished
    min_priority = 0              # the lowest (most urgent) priority class the tenant may ask for
    max_priority = 1000
    weight = 1.0                  # the tenant's share of the engine when tenants compete
    # max_running_shared = 16     # most rows it may have decoding while another tenant has work
                                  # (unset: the scheduler's default from its cost model, a batch
                                  # whose decode step is at most twice a step of one row; alone, no cap)
    # max_tokens_per_day = 2000000  # engine tokens (prompt + answer) per UTC day (unset: no limit);
                                  # a request that may not fit is refused (429) or, with
                                  # on_budget "partial", answers the rows that fit

    [tenants.analytics]
    key_sha256 = "5e884898da28..." # sha256 of the key, hex (preferred: the file holds no secret)
    max_rows_in_flight = 2000

    [tenants.sheets]
    key = "sheets-secret"          # a plain key is accepted too
    cache_group = "finance"        # share result-cache answers and the engine's prefix cache
                                   # with the group's other tenants
    min_priority = -10             # may run ahead of the neutral class 0

Each tenant's result-cache answers and prefix-cache blocks are its own (a hit would tell another
tenant that someone sent the same prompt) unless tenants name the same ``cache_group``.

Without a file (open mode) the one tenant may use every priority class; with a file, no tenant
may go below ``min_priority`` (default 0, the neutral class) unless the file says so.

With no file, or a file without tenants, the server runs in open single-tenant mode: no key is
needed, and everyone is the tenant ``default`` with the file's (or the built-in) limits.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from relserve.errors import ConfigError
from relserve.validation import PRIORITY_LIMIT

OPEN_TENANT = "default"


class Limits(BaseModel):
    """What one tenant may ask of the server (see the module docstring for the meaning of each)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_rows_in_flight: int = Field(10_000, ge=1)
    max_rows_per_request: int = Field(10_000, ge=1)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)
    max_template_chars: int = Field(32 * 1024, ge=16)
    max_placeholders: int = Field(64, ge=1)
    max_rendered_chars: int = Field(32 * 1024 * 1024, ge=1024)
    max_tokens_in_flight: int = Field(4_000_000, ge=64)
    #: None: 0 (the neutral class) for tenants of a file, the whole range in open mode
    min_priority: int | None = Field(None, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)
    max_priority: int = Field(PRIORITY_LIMIT, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)
    weight: float = Field(1.0, gt=0.0, le=1000.0)
    #: None: the scheduler's default (``PolicySettings.tenant_step_slowdown``)
    max_running_shared: int | None = Field(None, ge=1)
    #: engine tokens (prompt + answer, as the engine counts them) the tenant may spend per UTC
    #: day (None: no limit); see relserve/server/budget.py
    max_tokens_per_day: int | None = Field(None, ge=1)

    def priority_range(self, open_mode: bool) -> tuple[int, int]:
        low = self.min_priority if self.min_priority is not None else (-PRIORITY_LIMIT if open_mode else 0)
        return low, self.max_priority


class _TenantEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, min_length=8)
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    max_rows_in_flight: int | None = Field(None, ge=1)
    max_rows_per_request: int | None = Field(None, ge=1)
    max_body_bytes: int | None = Field(None, ge=1024)
    max_template_chars: int | None = Field(None, ge=16)
    max_placeholders: int | None = Field(None, ge=1)
    max_rendered_chars: int | None = Field(None, ge=1024)
    max_tokens_in_flight: int | None = Field(None, ge=64)
    min_priority: int | None = Field(None, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)
    max_priority: int | None = Field(None, ge=-PRIORITY_LIMIT, le=PRIORITY_LIMIT)
    weight: float | None = Field(None, gt=0.0, le=1000.0)
    max_running_shared: int | None = Field(None, ge=1)
    max_tokens_per_day: int | None = Field(None, ge=1)
    cache_group: str | None = Field(None, min_length=1, max_length=128)
    #: may read /metrics (every tenant's activity)
    admin: bool = False

    @model_validator(mode="after")
    def _one_key(self) -> _TenantEntry:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("give exactly one of key or key_sha256")
        return self


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limits: Limits = Field(default_factory=Limits)
    tenants: dict[str, _TenantEntry] = Field(default_factory=dict)
    #: sha256 (hex) of keys that may read /metrics only (besides admin tenants' keys)
    metrics_key_sha256: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _ranges(self) -> _File:
        for name, limits in [("limits", self.limits)] + [(f"tenants.{n}", e) for n, e in self.tenants.items()]:
            low, high = limits.min_priority, limits.max_priority
            if low is not None and high is not None and low > high:
                raise ValueError(f"{name}: min_priority {low} is above max_priority {high}")
        for h in self.metrics_key_sha256:
            if len(h) != 64 or any(c not in "0123456789abcdefABCDEF" for c in h):
                raise ValueError("metrics_key_sha256: each entry is the sha256 of a key, 64 hex digits")
        return self


@dataclass(frozen=True)
class Tenant:
    name: str
    limits: Limits
    #: whose result-cache answers this tenant reads and writes; None: the open server's one cache
    cache_scope: str | None = None
    #: may read /metrics
    admin: bool = False
    #: no keys configured (open mode): the whole priority range is allowed by default
    open_mode: bool = False
    #: one request of the tenant sent isolated (``isolated_view``)
    isolated: bool = False

    @property
    def prefix_cache_salt(self) -> str | None:
        """The engine prefix-cache namespace of this tenant's prompts (its cache group's, if it
        shares one); None in open mode (one tenant, one namespace), unless isolated."""
        if (self.open_mode and not self.isolated) or self.cache_scope is None:
            return None
        return self.cache_scope

    def isolated_view(self) -> Tenant:
        """The tenant for one request sent isolated (issue 63): the same name, limits, share and
        day, but a prefix-cache namespace (and label memory) of its own that no later request
        finds, and no result cache (``ServerState.cache_for``)."""
        scope = f"{self.cache_scope or 'open'}:isolated:{secrets.token_hex(8)}"
        return replace(self, cache_scope=scope, isolated=True)

    @property
    def priority_range(self) -> tuple[int, int]:
        return self.limits.priority_range(self.open_mode)


def hash_key(key: str) -> str:
    """The form a key is stored in (``key_sha256``)."""
    return hashlib.sha256(key.encode()).hexdigest()


class AuthError(Exception):
    """The request's key is missing or unknown (HTTP 401)."""


@dataclass
class Tenants:
    """Who may call the server, and with which limits."""

    by_hash: dict[str, Tenant] = field(default_factory=dict)
    default_limits: Limits = field(default_factory=Limits)
    #: hashes of keys that may read /metrics and nothing else
    metrics_hashes: set[str] = field(default_factory=set)

    @property
    def open(self) -> bool:
        """No keys configured: every request is the tenant ``default``."""
        return not self.by_hash

    @property
    def names(self) -> list[str]:
        return sorted({t.name for t in self.by_hash.values()}) or [OPEN_TENANT]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tenants:
        try:
            parsed = _File.model_validate(data)
        except ValidationError as e:
            raise ConfigError(f"tenants config: {_describe(e)}") from None
        base = parsed.limits
        by_hash: dict[str, Tenant] = {}
        for name, entry in parsed.tenants.items():
            own = {k: v for k, v in entry.model_dump(exclude={"key", "key_sha256", "cache_group", "admin"}).items() if v is not None}
            scope = f"group:{entry.cache_group}" if entry.cache_group else f"tenant:{name}"
            limits = Limits.model_validate({**base.model_dump(), **own})
            tenant = Tenant(name, limits, scope, admin=entry.admin)
            digest = (entry.key_sha256 or hash_key(entry.key or "")).lower()
            if digest in by_hash:
                raise ConfigError(f"tenants config: tenants {by_hash[digest].name!r} and {name!r} have the same key")
            by_hash[digest] = tenant
        return cls(by_hash, base, {h.lower() for h in parsed.metrics_key_sha256})

    @classmethod
    def from_file(cls, path: str | Path) -> Tenants:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"cannot read tenants config {path}: {e.strerror}") from None
        try:
            data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        except (json.JSONDecodeError, tomllib.TOMLDecodeError) as e:
            raise ConfigError(f"tenants config {path} is not valid {'JSON' if path.suffix == '.json' else 'TOML'}: {e}") from None
        return cls.from_dict(data)

    @classmethod
    def coerce(cls, value: Tenants | dict | str | Path | None) -> Tenants:
        if value is None:
            return cls()
        if isinstance(value, Tenants):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        return cls.from_file(value)

    def lookup(self, authorization: str | None) -> Tenant | None:
        """The tenant a request belongs to, or None if its key is missing or unknown."""
        if self.open:
            return Tenant(OPEN_TENANT, self.default_limits, open_mode=True)
        key = _bearer(authorization)
        return self.by_hash.get(hash_key(key)) if key else None

    def may_read_metrics(self, authorization: str | None) -> bool:
        """A metrics key, or the key of a tenant marked ``admin``."""
        key = _bearer(authorization)
        if not key:
            return False
        digest = hash_key(key)
        tenant = self.by_hash.get(digest)
        return digest in self.metrics_hashes or (tenant is not None and tenant.admin)

    def authenticate(self, authorization: str | None) -> Tenant:
        tenant = self.lookup(authorization)
        if tenant is not None:
            return tenant
        if not _bearer(authorization):
            raise AuthError("missing API key: send the header 'Authorization: Bearer <key>'")
        raise AuthError("unknown API key")


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, key = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    return key.strip()


def _describe(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'file'}: {err['msg']}" for err in e.errors())
