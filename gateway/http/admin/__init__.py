"""The operator dashboard at `/admin`: pages and scripts over the REST API, a session
cookie instead of the bearer token, and a doorbell socket for live updates."""

from gateway.http.admin.routes import router

__all__ = ["router"]
