#!/usr/bin/python3
"""Writes the seed corpora of fuzz_image (small PNGs and JPEGs of every colour type PIL writes,
plus damaged ones) and fuzz_cifar (a selector byte, then records) into fuzz/corpus/. Needs PIL
(python3-pil). Run from the repository root: /usr/bin/python3 fuzz/make_image_corpus.py"""
import io
import os
import struct
import zlib

from PIL import Image

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def save(kind, name, data):
    os.makedirs(os.path.join(root, kind), exist_ok=True)
    with open(os.path.join(root, kind, name), "wb") as f:
        f.write(data)


def encoded(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


rgb = Image.new("RGB", (9, 7))
rgb.putdata([((x * 29) % 256, (y * 37) % 256, (x * y * 11) % 256) for y in range(7) for x in range(9)])
images = {
    "png-rgb": encoded(rgb, "PNG"),
    "png-grey": encoded(rgb.convert("L"), "PNG"),
    "png-grey-alpha": encoded(rgb.convert("LA"), "PNG"),
    "png-rgba": encoded(rgb.convert("RGBA"), "PNG"),
    "png-palette": encoded(rgb.convert("P"), "PNG"),
    "png-1bit": encoded(rgb.convert("1"), "PNG"),
    "png-16bit": encoded(rgb.convert("L").convert("I").point(lambda v: v * 257).convert("I;16"), "PNG"),
    "png-optimized": encoded(rgb, "PNG", optimize=True),
    "jpeg-rgb-420": encoded(rgb, "JPEG", quality=80),
    "jpeg-rgb-444": encoded(rgb, "JPEG", quality=95, subsampling=0),
    "jpeg-grey": encoded(rgb.convert("L"), "JPEG"),
    "jpeg-progressive": encoded(rgb, "JPEG", progressive=True),
}
for name, data in images.items():
    save("image", name, data)
save("image", "png-truncated", images["png-rgb"][: len(images["png-rgb"]) // 2])
save("image", "jpeg-truncated", images["jpeg-rgb-420"][: len(images["jpeg-rgb-420"]) // 2])
ihdr = b"IHDR" + struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
save("image", "png-huge-header", b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + ihdr + struct.pack(">I", zlib.crc32(ihdr)))
save("image", "empty", b"")


def png(width, height, rows, level=9):
    """A grey 8-bit PNG with the given raw rows (filter byte included), written with zlib."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows, level)) + chunk(b"IEND", b""))


# The hostile-input run's memory cases (issue 37, D2 and D3), at the fuzz target's 2^20-pixel cap:
# a 1 x 2^20 strip (resized to 7 x 5 it takes the resampler's untabulated path; a few KB on disk),
# the 1 x 2^26 strip and an 8192 x 8192 image (refused by the cap from the header: their IDAT is
# cut short, as only the header is read), and a small PNG followed by 24 large ones in one input
# (fuzz_image takes one image: the decoder must stop at the first IEND or refuse the rest).
save("image", "png-tall-strip", png(1, 1 << 20, b"".join(b"\x00" + bytes([(y >> 12) % 256]) for y in range(1 << 20))))
save("image", "png-tall-over-cap", png(1, 1 << 26, b"\x00\x64" * 4096)[:200])
save("image", "png-8192-square", png(8192, 8192, bytes(8193) * 4)[:200])
save("image", "png-many-large", png(16, 16, bytes(17) * 16) + png(8192, 8192, bytes(8193) * 4)[:120] * 24)


def records(n, hundred, seed):
    out = b""
    for i in range(n):
        if hundred:
            out += bytes([(i * 7 + seed) % 20])
        out += bytes([(i * 3 + seed) % (100 if hundred else 10)])
        out += bytes(((i + seed) * 13 + k) % 256 for k in range(3072))
    return out


save("cifar", "cifar10-two", b"\x00" + records(2, False, 1))
save("cifar", "cifar100-fine", b"\x01" + records(2, True, 2))
save("cifar", "cifar100-coarse", b"\x02" + records(1, True, 3))
save("cifar", "cifar10-bad-label", b"\x00" + bytes([10]) + bytes(3072))
save("cifar", "cifar10-short", b"\x00" + records(1, False, 4)[:-1])
