"""``/docs``: Swagger UI from assets that searcher serves itself (``swagger_ui/``, vendored
with their licence), so that the page works without internet; FastAPI's default loads
them from a CDN and shows a blank page offline."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, swagger_ui_default_parameters
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

VERSION = "5.35.0"  # swagger-ui-dist's, see swagger_ui/README.md
ASSETS = Path(__file__).with_name("swagger_ui")
ASSETS_PATH = "/docs/assets"


def mount_docs(app: FastAPI) -> None:
    """``GET /docs`` and its assets under ``/docs/assets``. The app must be made with
    ``docs_url=None`` (and ``redoc_url=None``: ReDoc, too, loads from a CDN)."""
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        assets = f"{root}{ASSETS_PATH}"
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - API docs",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js?v={VERSION}",
            swagger_css_url=f"{assets}/swagger-ui.css?v={VERSION}",
            swagger_favicon_url=f"{assets}/favicon-32x32.png",
            # No validator badge: Swagger UI would load it from validator.swagger.io.
            swagger_ui_parameters={**swagger_ui_default_parameters, "validatorUrl": None},
        )
