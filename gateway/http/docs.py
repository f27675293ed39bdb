"""`/docs`: Swagger UI served from the installed `fastapi-offline` package.

It works without the internet (FastAPI's own page loads Swagger UI from a CDN) and
under a CSP without inline scripts: the page is plain HTML and its one script of
ours, `init.js`, is a file like the rest.
"""

from __future__ import annotations

import functools
from importlib.resources import files

from fastapi import APIRouter, HTTPException, Request, Response, status
from fastapi.responses import HTMLResponse

from gateway.http.assets import GET_AND_HEAD, Asset

__all__ = ["DOCS_CSP", "router"]

# Swagger UI styles elements inline and draws icons as data: images.
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'"
)
# A day: long enough to skip the 1.5 MB bundle on every visit, short enough to see an
# upgrade; the ETag makes the check after that cheap.
CACHE_CONTROL = "public, max-age=86400"

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Parley API</title>
<link rel="icon" type="image/png" href="/docs/assets/favicon.png">
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/init.js"></script>
</body>
</html>
"""

# validatorUrl null: Swagger UI would otherwise send the schema to validator.swagger.io.
INIT_JS = """window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
"""


_MEDIA_TYPES = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon.png": "image/png",
    "init.js": "text/javascript; charset=utf-8",
}

router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def docs() -> HTMLResponse:
    return HTMLResponse(PAGE, headers={"Content-Security-Policy": DOCS_CSP})


@router.api_route("/docs/assets/{name}", methods=GET_AND_HEAD)
async def asset(name: str, request: Request) -> Response:
    if name not in _MEDIA_TYPES:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such docs asset")
    return _load(name).response(request)


@functools.cache
def _load(name: str) -> Asset:
    # Read (and gzipped) on first use, once per process: the files only change when the
    # package is upgraded, and most gateways never serve them.
    if name == "init.js":
        body = INIT_JS.encode()
    else:
        body = (files("fastapi_offline") / "static" / name).read_bytes()
    return Asset(body, _MEDIA_TYPES[name], {"Cache-Control": CACHE_CONTROL})
