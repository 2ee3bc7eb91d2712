"""Tenants, their API keys and their limits, read from a TOML or JSON file.

A file looks like this (TOML; the JSON form has the same structure)::

    [limits]                      # defaults for every tenant
    max_rows_in_flight = 10000    # engine rows a tenant may have unfinished at once
    max_rows_per_request = 10000  # rows (or cells, or prompts) in one request
    max_body_bytes = 8388608      # size of one request body

    [tenants.analytics]
    key_sha256 = "5e884898da28..." # sha256 of the key, hex (preferred: the file holds no secret)
    max_rows_in_flight = 2000

    [tenants.sheets]
    key = "sheets-secret"          # a plain key is accepted too
    cache_group = "finance"        # share result-cache answers with the group's other tenants

Each tenant's result-cache answers are its own (a cache hit would tell another tenant that
someone sent the same prompt) unless tenants name the same ``cache_group``.

With no file, or a file without tenants, the server runs in open single-tenant mode: no key is
needed, and everyone is the tenant ``default`` with the file's (or the built-in) limits.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from relserve.errors import ConfigError

OPEN_TENANT = "default"


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_rows_in_flight: int = Field(10_000, ge=1)
    max_rows_per_request: int = Field(10_000, ge=1)
    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024)


class _TenantEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, min_length=8)
    key_sha256: str | None = Field(None, pattern=r"^[0-9a-fA-F]{64}$")
    max_rows_in_flight: int | None = Field(None, ge=1)
    max_rows_per_request: int | None = Field(None, ge=1)
    max_body_bytes: int | None = Field(None, ge=1024)
    cache_group: str | None = Field(None, min_length=1, max_length=128)

    @model_validator(mode="after")
    def _one_key(self) -> _TenantEntry:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError("give exactly one of key or key_sha256")
        return self


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limits: Limits = Field(default_factory=Limits)
    tenants: dict[str, _TenantEntry] = Field(default_factory=dict)


@dataclass(frozen=True)
class Tenant:
    name: str
    limits: Limits
    #: whose result-cache answers this tenant reads and writes; None: the open server's one cache
    cache_scope: str | None = None


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
            own = {k: v for k, v in entry.model_dump(exclude={"key", "key_sha256", "cache_group"}).items() if v is not None}
            scope = f"group:{entry.cache_group}" if entry.cache_group else f"tenant:{name}"
            tenant = Tenant(name, base.model_copy(update=own), scope)
            digest = (entry.key_sha256 or hash_key(entry.key or "")).lower()
            if digest in by_hash:
                raise ConfigError(f"tenants config: tenants {by_hash[digest].name!r} and {name!r} have the same key")
            by_hash[digest] = tenant
        return cls(by_hash, base)

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
            return Tenant(OPEN_TENANT, self.default_limits)
        key = _bearer(authorization)
        return self.by_hash.get(hash_key(key)) if key else None

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
