"""A platform's file read from its URL: never past a size, never its URL in an error (a
media URL is signed, or needs the token that goes with it)."""

from __future__ import annotations

import aiohttp

from gateway.errors import FileUnavailable, MediaRefused

# What a server answers for a link that has lapsed or was never good.
_GONE = frozenset({401, 403, 404, 410})


class LinkGone(FileUnavailable):
    """The URL no longer gives the file (it lapsed): one asked for afresh may."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=False)


async def read_at_most(http: aiohttp.ClientSession, url: str, limit: int, *, where: str) -> bytes:
    """The bytes at `url` (`where`: the server, as an error names it). `MediaRefused`
    past `limit` bytes, read no further; `LinkGone` for a lapsed link; `FileUnavailable`
    otherwise, transient where asking again may help (429, 5xx, the network)."""
    try:
        async with http.get(url) as response:
            status = response.status
            if status in _GONE:
                raise LinkGone(f"{where} answered HTTP {status}")
            if not response.ok:
                transient = status == 429 or status >= 500
                raise FileUnavailable(f"{where} answered HTTP {status}", transient=transient)
            data = bytearray()
            async for chunk in response.content.iter_any():
                data += chunk
                if len(data) > limit:
                    raise MediaRefused("too_large", f"the file is larger than {limit} bytes")
            return bytes(data)
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise FileUnavailable(
            f"{where} did not answer ({type(exc).__name__})", transient=True
        ) from None
