"""The relserve HTTP server: one embedded engine shared by many clients and tenants.

``create_app(engine, tenants=..., cache=...)`` builds the FastAPI app; ``relserve serve`` runs
it with uvicorn; ``ServerThread`` runs it in a background thread (tests, benchmarks).
Routes: /v1/relqueries (submit, stream, progress, cancel), /v1/cells (spreadsheet cells),
/v1/completions and /v1/chat/completions (OpenAI-compatible), /metrics, /health, /sheet, /addin.
"""

from relserve.server.app import create_app
from relserve.server.runner import ServerThread
from relserve.server.tenants import Limits, Tenant, Tenants, hash_key

__all__ = ["Limits", "ServerThread", "Tenant", "Tenants", "create_app", "hash_key"]
