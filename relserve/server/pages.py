"""The spreadsheet page (/sheet) and the Office add-in files (/addin/...), served as package data."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from relserve.server.errors import ApiError
from relserve.server.state import ServerState, get_state

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
ADDIN = HERE / "addin"

router = APIRouter(include_in_schema=False)

_TYPES = {".js": "text/javascript; charset=utf-8", ".json": "application/json", ".html": "text/html; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".png": "image/png", ".xml": "application/xml"}


def _file(folder: Path, name: str) -> FileResponse:
    path = (folder / name).resolve()
    if path.parent != folder or not path.is_file():
        raise ApiError(404, f"no such file: {name}")
    return FileResponse(path, media_type=_TYPES.get(path.suffix, "application/octet-stream"), headers={"Cache-Control": "no-cache"})


@router.get("/")
async def index():
    return RedirectResponse("/sheet")


@router.get("/favicon.ico")
async def favicon():
    return _file(ADDIN, "icon-32.png")


@router.get("/sheet")
async def sheet():
    return _file(STATIC, "sheet.html")


@router.get("/static/{name}")
async def static(name: str):
    return _file(STATIC, name)


def base_url(request: Request, state: ServerState) -> str:
    """The address written into the add-in files: ``--public-url``, else the address the
    connection came in on. Never the request's ``Host`` header: a client chooses that, and a
    manifest pointing elsewhere would send a victim's cells (and key) to another host."""
    if state.public_url:
        return state.public_url
    server = request.scope.get("server")
    if not server or server[1] is None:
        raise ApiError(503, "this server does not know its own address; start it with --public-url")
    host, port = server
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return f"{request.url.scheme}://{host}:{port}"


#: add-in files written for the server that serves them: its address, and the caller's key
_RENDERED = {"manifest.xml", "functions.js", "functions.html", "functions.json"}
_PLACEHOLDER_URL = "https://localhost:8443"


def _render_addin(name: str, request: Request, state: ServerState, key: str | None) -> Response:
    text = (ADDIN / name).read_text()
    text = text.replace(_PLACEHOLDER_URL, base_url(request, state))
    text = text.replace("__RELSERVE_KEY_QUERY__", f"?key={quote(key)}" if key else "")
    if name == "functions.js":
        text = text.replace('"__RELSERVE_API_KEY__"', json.dumps(key or ""))
    # the files carry the caller's key: no cache (browser, proxy, Office) may keep a copy, and
    # no page's address (functions.html?key=...) goes out as the Referer of the Office script
    headers = {"Cache-Control": "no-store", "Pragma": "no-cache", "Referrer-Policy": "no-referrer"}
    if name == "manifest.xml":
        headers["Content-Disposition"] = 'attachment; filename="relserve-manifest.xml"'
    return Response(text, media_type=_TYPES[Path(name).suffix], headers=headers)


@router.get("/addin/{name}")
async def addin(name: str, request: Request, key: str | None = None, state: ServerState = Depends(get_state)):
    """The Office add-in: manifest.xml (sideload it), functions.js/.json/.html, icons.

    ``?key=...`` writes that API key into the files (checked first), for servers with tenants.
    """
    if name not in _RENDERED:
        return _file(ADDIN, name)
    if key is not None and not state.tenants.open:
        state.tenants.authenticate(f"Bearer {key}")  # 401 for an unknown key
    return _render_addin(name, request, state, key)
