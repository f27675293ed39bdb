"""Files as people send them, and what a model is shown of them."""

from __future__ import annotations

import base64
import io
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
