"""Files as people send them, and what a model is shown of them."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from typing import Any

from PIL import ExifTags, Image

GPS = ExifTags.IFD.GPSInfo
# The first bytes of an Ogg Opus voice note, as Telegram's and WhatsApp's are.
VOICE = b"OggS\x00\x02" + bytes(22) + b"\x13OpusHead\x01\x01" + bytes(40)


def photo(width: int = 120, height: int = 80, *, orientation: int | None = None) -> bytes:
    """A JPEG as a phone writes it: a camera make, where it was taken, how it is held."""
    image = Image.new("RGB", (width, height), (200, 30, 30))
    exif = Image.Exif()
    exif[ExifTags.Base.Make] = "PhoneMaker"
    exif[GPS] = {
        ExifTags.GPS.GPSLatitudeRef: "N",
        ExifTags.GPS.GPSLatitude: (48.0, 51.0, 30.0),
        ExifTags.GPS.GPSLongitudeRef: "E",
        ExifTags.GPS.GPSLongitude: (2.0, 17.0, 40.0),
    }
    if orientation is not None:
        exif[ExifTags.Base.Orientation] = orientation
    out = io.BytesIO()
    image.save(out, format="JPEG", exif=exif)
    return out.getvalue()


def kept(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def shown_image(part: dict[str, Any]) -> Image.Image:
    """The image an OpenAI `image_url` part carries in its data URL."""
    assert part["type"] == "image_url"
    head, data = part["image_url"]["url"].split(",", 1)
    assert head in ("data:image/jpeg;base64", "data:image/png;base64")
    return Image.open(io.BytesIO(base64.b64decode(data)))


def pdf(pages: list[str]) -> bytes:
    """A PDF as a word processor writes one, a line of text a page (Helvetica)."""
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * n} 0 R" for n in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for n, text in enumerate(pages):
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * n} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 712 Td ({escaped}) Tj ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def bomb(side: int = 40_000) -> bytes:
    """A PNG of a few dozen bytes that declares `side`×`side` pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * 64))
        + chunk(b"IEND", b"")
    )
