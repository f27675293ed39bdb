"""Images decoded once with Pillow: a decompression bomb refused before decoding, the
orientation applied and every other piece of metadata (EXIF, GPS, comments) left
behind, the longest side at most 1568 px.

Decoding is CPU work of up to a second for a large photo: callers run it in a thread
(`asyncio.to_thread`), never on the event loop.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

from gateway.errors import MediaRefused

# What a model is given at most; larger gains it nothing (both providers scale down).
LONGEST_SIDE = 1568
# Pixels an image may declare: a photo from any phone is far below (48 MP is 48e6); a
# small file declaring more is a decompression bomb, refused from its header alone.
MAX_PIXELS = 64_000_000
FORMATS = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}
JPEG_QUALITY = 85


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    data: bytes
    mime: str  # image/jpeg, or image/png where the image has transparency
    width: int
    height: int


def process_image(data: bytes) -> ProcessedImage:
    """The image as a model gets it; `MediaRefused` if it is none Parley reads, corrupt,
    or a bomb."""
    try:
        with Image.open(io.BytesIO(data), formats=list(FORMATS)) as image:
            if image.width * image.height > MAX_PIXELS:
                raise MediaRefused(
                    "too_large", f"the image is {image.width}×{image.height} pixels: too many"
                )
            image.seek(0)  # an animation: its first frame
            # A JPEG can be decoded at a half, quarter or eighth of its size: no larger
            # than it will be kept, so a 48 MP photo never takes 48 MP of memory.
            image.draft("RGB", (LONGEST_SIDE, LONGEST_SIDE))
            image.load()
            shown = ImageOps.exif_transpose(image)
    except MediaRefused:
        raise
    except Image.DecompressionBombError:
        raise MediaRefused("too_large", "the image declares too many pixels") from None
    except UnidentifiedImageError:
        raise MediaRefused("unsupported", "not an image this gateway reads") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise MediaRefused("corrupt", f"the image could not be read: {exc}") from None
    shown.thumbnail((LONGEST_SIDE, LONGEST_SIDE), Image.Resampling.LANCZOS)
    transparent = shown.mode in ("RGBA", "LA") or "transparency" in shown.info
    out = io.BytesIO()
    # Saved afresh with nothing carried over: no EXIF (so no GPS), no comments.
    if transparent:
        shown.convert("RGBA").save(out, format="PNG", optimize=True)
        mime = "image/png"
    else:
        shown.convert("RGB").save(out, format="JPEG", quality=JPEG_QUALITY)
        mime = "image/jpeg"
    return ProcessedImage(out.getvalue(), mime, shown.width, shown.height)
