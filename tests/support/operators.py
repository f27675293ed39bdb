"""A dashboard session as a browser holds one, for tests that speak HTTP themselves: the
cookie the sign-in set and the CSRF token the dashboard's page carries."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.http.operators import COOKIE, CSRF_HEADER
from tests.support.harness import ADMIN_TOKEN, Gateway

_CSRF_META = re.compile(r'<meta name="parley-csrf" content="([^"]+)">')


@dataclass(frozen=True)
class Signed:
    cookie: str  # the session cookie's value
    csrf: str

    def headers(self, *, csrf: str | None = "", origin: str | None = None) -> dict[str, str]:
        """The cookie; the session's CSRF token unless `csrf` says another (None: none);
        an Origin header when given."""
        headers = {"Cookie": f"{COOKIE}={self.cookie}"}
        if csrf is not None:
            headers[CSRF_HEADER] = csrf or self.csrf
        if origin is not None:
            headers["Origin"] = origin
        return headers


async def sign_in(gw: Gateway, token: str = ADMIN_TOKEN) -> Signed:
    """Sign in as the page does; the cookie is then sent by hand (the client's jar keeps
    nothing, so a request carries a session only where a test says)."""
    response = await gw.http.post("/admin/session", json={"token": token})
    assert response.status_code == 204, response.text
    cookie = response.cookies[COOKIE]
    gw.http.cookies.clear()
    page = await gw.http.get("/admin", headers={"Cookie": f"{COOKIE}={cookie}"})
    assert page.status_code == 200, page.text
    found = _CSRF_META.search(page.text)
    assert found is not None, page.text
    return Signed(cookie, found.group(1))
