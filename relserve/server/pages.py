"""The spreadsheet page (/sheet) and the Office add-in files (/addin/...), served as package data."""

from __future__ import annotations

from pathlib import Path

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


@router.get("/sheet")
async def sheet():
    return _file(STATIC, "sheet.html")


@router.get("/static/{name}")
async def static(name: str):
    return _file(STATIC, name)


def base_url(request: Request, state: ServerState) -> str:
    return (state.public_url or str(request.base_url)).rstrip("/")


@router.get("/addin/manifest.xml")
async def manifest(request: Request, state: ServerState = Depends(get_state)):
    """The add-in manifest with this server's address filled in (Office needs absolute https URLs)."""
    text = (ADDIN / "manifest.xml").read_text().replace("https://localhost:8443", base_url(request, state))
    return Response(text, media_type=_TYPES[".xml"], headers={"Content-Disposition": 'attachment; filename="relserve-manifest.xml"'})


@router.get("/addin/{name}")
async def addin(name: str):
    return _file(ADDIN, name)
