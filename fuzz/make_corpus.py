#!/usr/bin/python3
# Writes the seed corpora for the fuzz targets (python3 stdlib only; run again to regenerate):
# fuzz/corpus/idx/ small valid and invalid IDX files, raw and gzip; fuzz/corpus/model/ the
# examples plus variants of the model description. Deterministic: same files every run.
import gzip, json, os, pathlib, struct, zlib

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def idx(dims, payload, magic=None):
    head = struct.pack(">I", magic if magic is not None else 0x800 + len(dims))
    return head + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)


def gz(data, level=9):
    return gzip.compress(data, compresslevel=level, mtime=0)


def pattern(n, seed=1):
    out, x = bytearray(), seed
    for _ in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(x >> 24)
    return bytes(out)


def write(dirname, name, data):
    d = HERE / "corpus" / dirname
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def idx_corpus():
    images = idx([3, 8, 8], pattern(192))
    labels = idx([6], bytes([0, 1, 2, 3, 9, 5]))
    seeds = {
        "images-3x8x8": images,
        "labels-6": labels,
        "rank4-2x1x3x2": idx([2, 1, 3, 2], pattern(12, 5)),
        "zero-count": idx([0, 28, 28], b""),
        "wrong-magic": idx([1, 2, 2], pattern(4), magic=0x12345678),
        "float-type": idx([1, 2, 2], pattern(16), magic=0x00000D03),
        "rank0": idx([], b"", magic=0x00000800),
        "rank5": idx([1, 1, 1, 1, 1], b"\x01", magic=0x00000805),
        "zero-rows": idx([3, 0, 28], b""),
        "over-cap": idx([1, 65536, 65537], pattern(16)),
        "dims-overflow": idx([0xFFFFFFFF] * 4, pattern(16)),
        "truncated": images[:-7],
        "trailing": images + b"\x01\x02\x03",
        "short-magic": b"\x00\x00",
        "empty": b"",
        "images.gz": gz(images),
        "labels.gz": gz(labels),
        "images-stored.gz": gz(images, level=0),
        "zeros-compressible.gz": gz(idx([4, 16, 16], bytes(1024))),
        "gzip-stub": bytes([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, 0, 3]),
        "gzip-isize-lies": gz(idx([10, 4, 4], pattern(100))),
        "gzip-half": gz(images)[: len(gz(images)) // 2],
        "gzip-bad-crc": bytearray(gz(labels)),
        "gzip-junk-after": gz(labels) + b"junk!!!",
        "gzip-two-members": gz(b"") + gz(labels),
        "gzip-extra-member": gz(labels) + gz(pattern(len(labels), 9)),
    }
    crc = seeds["gzip-bad-crc"]
    crc[-8] ^= 0xFF
    seeds["gzip-bad-crc"] = bytes(crc)
    # A forged trailer claiming the full 4 GiB payload (dims 1 x 65536 x 65536).
    liar = bytearray(gz(idx([1, 65536, 65536], pattern(200))))
    liar[-4:] = struct.pack("<I", 16)
    seeds["gzip-claims-4gib"] = bytes(liar)
    for name, data in seeds.items():
        write("idx", name, data)


def model_corpus():
    for p in sorted((ROOT / "examples").glob("*.json")):
        write("model", "example-" + p.name, p.read_bytes())
    variants = {
        "mlp": {"input": [1, 28, 28], "layers": [{"type": "flatten"}, {"type": "linear", "out_features": 32},
                                                 {"type": "relu"}, {"type": "linear", "out_features": 10}]},
        "every-key": {"name": "all", "input": [3, 9, 7], "classes": 4, "loss": "mse", "init": "torch",
                      "layers": [{"type": "conv2d", "out_channels": 6, "kernel": [3, 2], "stride": [2, 1],
                                  "padding": [1, 0], "groups": 3, "bias": False, "init": "xavier"},
                                 {"type": "sigmoid"},
                                 {"type": "maxpool2d", "kernel": [2, 3], "stride": 1, "padding": [1, 1]},
                                 {"type": "avgpool2d", "kernel": 2, "stride": [1, 2]},
                                 {"type": "flatten"}, {"type": "linear", "out_features": 4, "bias": True,
                                                       "init": "kaiming"},
                                 {"type": "tanh"}, {"type": "softmax"}]},
        "fused": {"input": [1, 8, 8], "loss": "cross_entropy",
                  "layers": [{"type": "conv2d", "out_channels": 2, "kernel": 3, "padding": 1},
                             {"type": "relu"}, {"type": "maxpool2d", "kernel": 2},
                             {"type": "flatten"}, {"type": "linear", "out_features": 10},
                             {"type": "softmax"}]},
        "bad-unknown-key": {"input": [1, 4, 4], "layers": [{"type": "relu", "size": 3}]},
        "bad-kernel-too-big": {"input": [1, 4, 4], "layers": [{"type": "conv2d", "out_channels": 1,
                                                               "kernel": 9}]},
        "bad-last-layer": {"input": [1, 4, 4], "layers": [{"type": "flatten"}]},
        "bad-groups": {"input": [3, 4, 4], "layers": [{"type": "conv2d", "out_channels": 4, "kernel": 1,
                                                       "groups": 2}]},
        "huge-linear": {"input": [65536, 65536, 1], "layers": [{"type": "flatten"},
                                                               {"type": "linear", "out_features": 1048576}]},
        "huge-kernel": {"input": [65536, 2, 1], "layers": [{"type": "conv2d", "out_channels": 1048576,
                                                            "kernel": 4096, "padding": 2048},
                                                           {"type": "flatten"},
                                                           {"type": "linear", "out_features": 10}]},
        "huge-input": {"input": [65536, 65536, 65536], "layers": [{"type": "flatten"},
                                                                  {"type": "linear", "out_features": 10}]},
        "wide-conv": {"input": [64, 64, 64], "layers": [{"type": "conv2d", "out_channels": 64, "kernel": 64,
                                                         "padding": 32, "groups": 1},
                                                        {"type": "avgpool2d", "kernel": 2},
                                                        {"type": "flatten"},
                                                        {"type": "linear", "out_features": 10}]},
    }
    for name, m in variants.items():
        write("model", name + ".json", json.dumps(m, indent=1).encode())
    write("model", "not-json", b"{\"layers\": [")
    write("model", "deep-nesting", b"[" * 200 + b"]" * 200)
    write("model", "name-not-string", b'{"name": 7, "layers": [{"type": "relu"}]}')


if __name__ == "__main__":
    idx_corpus()
    model_corpus()
