"""Sessions for the gateway's hot HTTP calls out: the model's stream, the Bot API, the
Graph API, platform files.

aiohttp, not httpx: its C parser costs about a quarter of the CPU a call
(bench/README.md, stop 44). The environment's proxy (`HTTPS_PROXY`, `NO_PROXY`, …)
applies as it did with httpx, but is looked up once, when the session opens: aiohttp's
own `trust_env` looks it up, and reads `~/.netrc`, in a worker thread on every request.
"""

from __future__ import annotations

import urllib.parse
import urllib.request
from collections.abc import Mapping

import aiohttp


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for `url`, None if none or if `NO_PROXY`
    exempts its host."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None  # no URL: its calls fail as they are made, and say why
    if host and urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies().get(parts.scheme)


def client_session(
    url: str,
    timeout: aiohttp.ClientTimeout,
    *,
    headers: Mapping[str, str] | None = None,
    connections: int = 100,
) -> aiohttp.ClientSession:
    """A session for calls to the service at `url` (its proxy is that URL's). It needs
    a running event loop; close it when done."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections),
        timeout=timeout,
        headers=headers,
        proxy=env_proxy(url),
    )
