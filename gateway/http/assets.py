"""The gateway's own script and style files, read once at start-up and served small.

Each is gzipped once, not per request, and carries a strong ETag, so a browser that
loads the widget on every page view of a site revalidates with a 304 instead of
downloading it again. Only these public, secret-free files are compressed: a compressed
answer that mixes a secret with what a visitor sent could leak the secret (BREACH).
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request, Response

# Browsers check back after this long; the ETag makes the check cheap.
DEFAULT_CACHE = "no-cache"
# What a file or page without side effects answers: HEAD is a GET whose body the server
# leaves out (uvicorn does), so link checkers and `curl -I` see the real headers.
GET_AND_HEAD = ["GET", "HEAD"]


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    headers: Mapping[str, str] = field(default_factory=dict)
    gzipped: bytes | None = field(init=False)  # None: gzip would not make it smaller
    etag: str = field(init=False)

    def __post_init__(self) -> None:
        # mtime=0: the same bytes, and the same ETag, on every replica and every start.
        packed = gzip.compress(self.body, 9, mtime=0)
        object.__setattr__(self, "gzipped", packed if len(packed) < len(self.body) else None)
        digest = hashlib.sha256(self.body).hexdigest()[:32]
        object.__setattr__(self, "etag", f'"{digest}"')

    @classmethod
    def read(cls, path: Path, media_type: str, **headers: str) -> Asset:
        return cls(path.read_bytes(), media_type, headers)

    def response(self, request: Request) -> Response:
        takes = _takes_gzip(request.headers.get("accept-encoding", ""))
        packed = self.gzipped if takes else None
        # Each encoding is other bytes, so another strong ETag (RFC 9110, 8.8.3).
        etag = self.etag if packed is None else self.etag[:-1] + '-gz"'
        headers = {"ETag": etag, "Cache-Control": DEFAULT_CACHE, "Vary": "Accept-Encoding"}
        headers |= self.headers
        if etag in _etags(request.headers.get("if-none-match", "")):
            return Response(status_code=304, headers=headers)
        if packed is not None:
            headers["Content-Encoding"] = "gzip"
            return Response(packed, media_type=self.media_type, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


def _etags(header: str) -> set[str]:
    return {tag.strip().removeprefix("W/") for tag in header.split(",")}


def _takes_gzip(header: str) -> bool:
    for coding in header.split(","):
        name, _, params = coding.partition(";")
        if name.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False
