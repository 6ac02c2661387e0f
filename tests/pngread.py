"""A small PNG reader for the tests: 8-bit RGB or RGBA, not interlaced (what Chromium's screenshots are).

Chunks: IHDR gives the size and the pixel format; the IDAT chunks, joined, are one zlib stream of
scanlines, each a filter byte followed by the line's bytes, filtered against the line above.
"""

from __future__ import annotations

import struct
import zlib


def read_png(data: bytes) -> tuple[int, int, int, bytes]:
    """(width, height, bytes per pixel, the unfiltered pixel bytes, row after row)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length  # length, type, body, CRC
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    out = bytearray(height * stride)
    above = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = above[i], above[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
            elif kind != 0:
                raise ValueError(f"bad filter type {kind} in row {y}")
        out[y * stride:(y + 1) * stride] = line
        above = line
    return width, height, bpp, bytes(out)


def solid_blocks(image: tuple[int, int, int, bytes], rgb: tuple[int, int, int], size: int) -> int:
    """How many ``size``×``size`` squares of a ``read_png`` picture are all exactly the colour ``rgb``
    (bars are; antialiased text is not)."""
    width, _, bpp, pixels = image
    wanted, found, at = bytes(rgb), set(), pixels.find(bytes(rgb))
    while at >= 0:
        if at % bpp == 0:
            found.add(divmod(at // bpp, width))  # (y, x)
        at = pixels.find(wanted, at + 1)
    return sum(1 for y, x in found if all((y + dy, x + dx) in found for dy in range(size) for dx in range(size)))
