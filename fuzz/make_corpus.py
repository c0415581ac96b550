#!/usr/bin/python3
# Writes the seed corpora for the fuzz targets (python3 stdlib only; run again to regenerate):
# fuzz/corpus/idx/ small valid and invalid IDX files, raw and gzip; fuzz/corpus/model/ the
# examples plus variants of the model description; and the hand-made seeds of
# fuzz/corpus/safetensors/ and fuzz/corpus/checkpoint/ (nesting at and past the JSON limits,
# duplicate keys, sizes and counters that lie), built around a synthetic file of the fuzz-tiny
# model (fuzz_model_tiny.h). The seeds written by `ember train` (weights, adam-*, sgd-last) come
# from make_io_corpus.sh. Deterministic: same files every run.
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


def nest(depth, inner=""):
    """`depth` nested arrays around `inner`: the brackets that count against a JSON depth limit."""
    return "[" * depth + inner + "]" * depth


def model_hostile_corpus():
    # JSON depth of the model reader: 32 (kMaxDepth in src/nn/model.cpp). The top-level object
    # counts as 1, so "nest-layers-32" is the deepest text the pre-scan lets through (then refused
    # as a layer that is not an object) and every deeper one is refused before parsing.
    for depth in (32, 33, 65, 100, 2000):
        write("model", f"nest-layers-{depth}", ('{"layers": ' + nest(depth - 1) + "}").encode())
    write("model", "nest-objects-33",
          ('{"layers": [' + '{"type": ' * 31 + '"relu"' + "}" * 31 + "]}").encode())
    # Duplicate keys are refused by ember::parse_json, at any depth (which one was meant is unclear).
    relu, lin = '{"type": "relu"}', '{"type": "linear", "out_features": 10}'
    dups = {
        "dup-layers": '{"input": [1, 4, 4], "layers": [{"type": "flatten"}, ' + lin + '], '
                      '"layers": [{"type": "flatten"}, {"type": "linear", "out_features": 3}]}',
        "dup-type": '{"input": [1, 4, 4], "layers": [{"type": "flatten"}, '
                    '{"type": "linear", "type": "relu", "out_features": 10}]}',
        "dup-input": '{"input": [1, 4, 4], "input": [3, 8, 8], "layers": [{"type": "flatten"}, ' + lin + ']}',
        "dup-loss": '{"loss": "mse", "loss": "cross_entropy", "layers": [{"type": "flatten"}, ' + lin + ']}',
        "dup-in-last-layer": '{"input": [1, 4, 4], "layers": [{"type": "flatten"}, ' + relu + ', '
                             '{"type": "linear", "out_features": 10, "out_features": 10}]}',
    }
    for name, text in dups.items():
        write("model", name + ".json", text.encode())
    # The loss against the last layer: cross_entropy needs a softmax last, softmax_cross_entropy
    # (the default) must not follow one.
    mlp = [{"type": "flatten"}, {"type": "linear", "out_features": 10}]
    soft = mlp + [{"type": "softmax"}]
    losses = {
        "loss-ce-no-softmax": {"input": [1, 4, 4], "loss": "cross_entropy", "layers": mlp},
        "loss-ce-softmax-not-last": {"input": [1, 4, 4], "loss": "cross_entropy",
                                     "layers": soft + [{"type": "linear", "out_features": 10}]},
        "loss-sce-after-softmax": {"input": [1, 4, 4], "loss": "softmax_cross_entropy", "layers": soft},
        "loss-default-after-softmax": {"input": [1, 4, 4], "layers": soft},
        "loss-sce-double-softmax": {"input": [1, 4, 4], "loss": "softmax_cross_entropy",
                                    "layers": soft + [{"type": "softmax"}]},
        "loss-ce-softmax-ok": {"input": [1, 4, 4], "loss": "cross_entropy", "layers": soft},
    }
    for name, m in losses.items():
        write("model", name + ".json", json.dumps(m).encode())


# --- safetensors and checkpoints of the fuzz-tiny model -------------------------------------

TINY_MODEL = {"classes": 10, "init": "kaiming", "input": [1, 28, 28], "loss": "softmax_cross_entropy",
              "name": "fuzz-tiny",
              "layers": [{"bias": True, "groups": 1, "kernel": 7, "out_channels": 1, "padding": 0,
                          "stride": 7, "type": "conv2d"},
                         {"type": "flatten"}, {"bias": True, "out_features": 10, "type": "linear"}]}
# (name, shape, begin, end) of fuzz-tiny's parameters, in the order ember writes them.
TINY_TENSORS = [("0.bias", [1], 196, 200), ("0.weight", [1, 1, 7, 7], 0, 196),
                ("2.bias", [10], 840, 880), ("2.weight", [10, 16], 200, 840)]


def tiny_data():
    """880 bytes of small finite F32 values (so that a seed that passes every check loads)."""
    vals, x = [], 7
    for _ in range(220):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        vals.append((x / 2**32 - 0.5) * 0.2)
    return struct.pack("<220f", *vals)


def compact(v):
    return json.dumps(v, separators=(",", ":"), sort_keys=True)


def obj(pairs):
    """A JSON object from (key, JSON text) pairs, in order: keys may repeat, values are raw text."""
    return "{" + ",".join(json.dumps(k) + ":" + v for k, v in pairs) + "}"


def tensor(shape, begin, end, dtype="F32"):
    return obj([("data_offsets", compact([begin, end])), ("dtype", json.dumps(dtype)),
                ("shape", compact(shape))])


def safetensors(header, data):
    """The 8-byte little-endian header length, the header padded with spaces to 8 bytes (as
    ember writes it), then the data."""
    header = header.encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header)) + header + data


def tiny_tensor_pairs(**replace):
    """The four tensors' (name, JSON text) pairs; replace={name: text} swaps one entry's value."""
    return [(n, replace.get(n, tensor(s, b, e))) for n, s, b, e in TINY_TENSORS]


def weight_meta_pairs():
    return [("ember_version", '"0.1.0"'), ("format", '"pt"'), ("model", json.dumps(compact(TINY_MODEL)))]


def safetensors_corpus():
    data = tiny_data()

    def weights(tensors=None, meta=None, extra=()):
        pairs = list(tensors if tensors is not None else tiny_tensor_pairs())
        pairs.append(("__metadata__", obj(meta if meta is not None else weight_meta_pairs())))
        return safetensors(obj(pairs + list(extra)), data)

    seeds = {"synthetic-weights": weights()}
    # ember::parse_json's depth limit is 64 and the header object is level 1, a tensor's object
    # level 2: a dtype inside 62 arrays is the deepest the pre-scan lets through (then refused
    # as a dtype); 63 and more are refused before parsing. The 2,000-deep ones are left
    # unclosed (as a stream of "[" would be) to stay small.
    for depth in (64, 65, 100):
        t = obj([("data_offsets", "[196,200]"), ("dtype", nest(depth - 2, '"F32"')), ("shape", "[1]")])
        seeds[f"nest-dtype-{depth}"] = weights(tiny_tensor_pairs(**{"0.bias": t}))
    seeds["nest-dtype-2000-unclosed"] = safetensors(
        obj(tiny_tensor_pairs()[:1])[:-1].replace('"dtype":"F32"', '"dtype":' + "[" * 2000), data)
    for depth in (64, 65, 100):
        seeds[f"nest-metadata-{depth}"] = weights(meta=weight_meta_pairs() + [("nested", nest(depth - 2, '"x"'))])
    seeds["nest-metadata-2000-unclosed"] = safetensors('{"__metadata__":{"format":' + "[" * 2000, data)
    # Duplicate keys: the same tensor twice (same or another range), a field twice in one
    # tensor, a metadata key twice, __metadata__ twice.
    t = tiny_tensor_pairs()
    seeds["dup-tensor-same"] = weights(t + [t[0]])
    seeds["dup-tensor-other-range"] = weights(t + [("0.bias", tensor([1], 840, 844))])
    seeds["dup-tensor-other-shape"] = weights(t[:3] + [("2.weight", tensor([16, 10], 200, 840)), t[3]])
    seeds["dup-dtype-in-tensor"] = weights(tiny_tensor_pairs(**{"0.bias": obj(
        [("data_offsets", "[196,200]"), ("dtype", '"F32"'), ("dtype", '"F16"'), ("shape", "[1]")])}))
    seeds["dup-metadata-key"] = weights(meta=weight_meta_pairs() + [("format", '"tf"')])
    seeds["dup-metadata"] = weights(extra=[("__metadata__", obj([("format", '"pt"')]))])
    # Sizes that lie: 2^53 elements (the largest size a dimension may have), products past
    # 2^64 elements or bytes, a dimension past 2^53.
    p53 = 2**53
    lies = {
        "shape-2p53": tensor([p53], 196, 200),                          # needs 2^55 bytes, spans 4
        "shape-2p53-offsets-claim": tensor([p53], 196, 196 + 4 * p53),  # the claim, past the file
        "shape-2p53-u8": tensor([p53], 0, p53, "U8"),
        "shape-2p53x2p53": tensor([p53, p53], 196, 200),                # elements past 2^64
        "shape-2p32x2p32": tensor([2**32, 2**32], 196, 200),            # exactly 2^64 elements
        "shape-bytes-overflow": tensor([2**31, 2**31], 196, 200),       # 2^62 elements, 2^64 bytes
        "shape-2p53-plus-1": tensor([p53 + 1], 196, 200),
        "shape-rank-17": tensor([1] * 17, 196, 200),
        "shape-zero-dim": tensor([0, p53], 196, 196),
    }
    for name, t in lies.items():
        seeds[name] = weights(tiny_tensor_pairs(**{"0.bias": t}))
    # data_offsets beyond the 880 data bytes, reversed, at 2^64 - 1, negative, not integers.
    offsets = {
        "offsets-past-end": tensor([10], 844, 884),
        "offsets-start-past-end": tensor([10], 1000, 1040),
        "offsets-u64-max": tensor([10], 2**64 - 41, 2**64 - 1),
        "offsets-end-u64-max": tensor([10], 840, 2**64 - 1),
        "offsets-reversed": tensor([10], 880, 840),
        "offsets-negative": obj([("data_offsets", "[-40,0]"), ("dtype", '"F32"'), ("shape", "[10]")]),
        "offsets-float": obj([("data_offsets", "[840.0,880.0]"), ("dtype", '"F32"'), ("shape", "[10]")]),
        "offsets-past-2p64": obj([("data_offsets", "[840,18446744073709551656]"), ("dtype", '"F32"'),
                                  ("shape", "[10]")]),
    }
    for name, t in offsets.items():
        seeds[name] = weights(tiny_tensor_pairs(**{"2.bias": t}))
    # I64, which only a BatchNorm's num_batches_tracked may be: a bias claiming it (8 bytes for
    # one element: the range lies too), and a 0-dim num_batches_tracked the model does not have.
    n = len(data)
    seeds["i64-bias"] = weights(tiny_tensor_pairs(**{"0.bias": tensor([1], 196, 200, "I64")}))
    seeds["i64-bias-8-bytes"] = safetensors(obj(tiny_tensor_pairs(**{"0.bias": tensor([1], n, n + 8, "I64")}) +
                                                [("__metadata__", obj(weight_meta_pairs()))]), data + bytes(8))
    seeds["i64-num-batches-tracked-extra"] = safetensors(obj(tiny_tensor_pairs() + [
        ("0.num_batches_tracked", tensor([], n, n + 8, "I64")), ("__metadata__", obj(weight_meta_pairs()))]), data + bytes(8))
    # The file is shorter than the header says (memory: the length field lies).
    whole = weights()
    seeds["header-length-lies"] = struct.pack("<Q", len(whole) - 8 + 1) + whole[8:]
    seeds["header-length-2p63"] = struct.pack("<Q", 2**63) + whole[8:]
    for name, b in seeds.items():
        write("safetensors", name, b)


def checkpoint_corpus():
    """SGD checkpoints of fuzz-tiny (fuzz_checkpoint loads each with Adam and with SGD), as ember
    writes them but with a short config: the state says 4 steps of batch 16 in epoch 0."""
    data = tiny_data()
    config = {"batch_size": 16, "checkpoint_every": 4, "data": "d", "early_stop_tol": 0.0, "epochs": 1,
              "gamma": 0.5, "init": "", "isa": "", "keep_checkpoints": 3, "l2": 0.0001, "limit_test": 0,
              "limit_train": 0, "lr": 0.001, "lr_min": 1e-05, "metrics_so_far": [], "model": "m.json",
              "momentum": 0.9, "no_shuffle": False, "on_nonfinite": "stop", "optimizer": "sgd",
              "schedule": "cosine", "seed": 1, "step_size": 5, "t_max": 20, "threads": 1,
              "train_count": 64, "train_crc32": 1881966305, "weight_decay": 0.0}
    state = {"batch": 4, "correct": 4, "epoch": 0, "loss_sum": 9.25, "prev_train_loss": 0.0,
             "seconds": 0.00025, "skipped": 0}

    def ck_text(version="1", state_text=None, config_text=None, extra=()):
        """The ember_checkpoint JSON text; each part is raw JSON text so it can lie."""
        return obj([("config", config_text if config_text is not None else compact(config)),
                    ("data_order", compact({"generator": "pcg32", "next_sample": 64})),
                    ("optimizer", '"sgd"'), ("optimizer_steps", "4"),
                    ("state", state_text if state_text is not None else compact(state)),
                    ("version", version)] + list(extra))

    def checkpoint(text=None, meta_extra=()):
        meta = [("ember_checkpoint", json.dumps(text if text is not None else ck_text()))]
        meta += weight_meta_pairs() + list(meta_extra)
        return safetensors(obj(tiny_tensor_pairs() + [("__metadata__", obj(meta))]), data)

    def with_state(**kv):
        return ck_text(state_text=compact(dict(state, **kv)))

    def with_config(**kv):
        return ck_text(config_text=compact(dict(config, **kv)))

    seeds = {"synthetic-sgd": checkpoint()}
    # ember_checkpoint is a JSON string inside the header, parsed again with the same limit of
    # 64 levels (its object is level 1): "version" inside 63 arrays gets through the pre-scan
    # (then refused as a version), 64 and more are refused before parsing.
    for depth in (64, 65, 100):
        seeds[f"nest-version-{depth}"] = checkpoint(ck_text(version=nest(depth - 1, "1")))
    seeds["nest-version-2000-unclosed"] = checkpoint('{"version":' + "[" * 2000)
    seeds["nest-metrics-65"] = checkpoint(ck_text(config_text=compact(config)[:-1] + ',"nested":' +
                                                  nest(63, '"x"') + "}"))
    # Duplicate keys inside the string, and in the metadata around it.
    seeds["dup-version"] = checkpoint(ck_text(extra=[("version", "2")]))
    seeds["dup-state"] = checkpoint(ck_text(extra=[("state", compact(dict(state, correct=0)))]))
    seeds["dup-correct"] = checkpoint(ck_text(state_text=compact(state)[:-1] + ',"correct":0}'))
    seeds["dup-config-key"] = checkpoint(ck_text(config_text=compact(config)[:-1] + ',"batch_size":0}'))
    seeds["dup-ember-checkpoint"] = checkpoint(meta_extra=[("ember_checkpoint", json.dumps(ck_text(version="2")))])
    # Counters no run can have: 4 steps of batch 16 (and the fuzz target's batch of 1) cannot
    # have 65 correct predictions; 2^53 is the most the parser takes, 2^53 + 1 is out of range.
    seeds["correct-over-seen"] = checkpoint(with_state(correct=65))
    seeds["correct-over-batch-1"] = checkpoint(with_state(correct=5))
    seeds["correct-2p53"] = checkpoint(with_state(correct=2**53))
    seeds["correct-2p53-plus-1"] = checkpoint(with_state(correct=2**53 + 1))
    seeds["correct-negative"] = checkpoint(with_state(correct=-1))
    seeds["correct-u64-max"] = checkpoint(with_state(correct=2**64 - 1))
    seeds["skipped-over-batch"] = checkpoint(with_state(skipped=5))
    seeds["batch-2p40-correct-2p53"] = checkpoint(with_state(batch=2**40, correct=2**53))
    seeds["loss-sum-negative"] = checkpoint(with_state(loss_sum=-1.0))
    seeds["loss-sum-1e308"] = checkpoint(with_state(loss_sum=1e308))
    seeds["epoch-over-max"] = checkpoint(with_state(epoch=100001))
    # The configuration: metrics_so_far of the wrong type (`ember train --resume` checks it), a
    # batch size of 0, a config that is not an object.
    seeds["metrics-not-array"] = checkpoint(with_config(metrics_so_far=7))
    seeds["metrics-object"] = checkpoint(with_config(metrics_so_far={"0": "epoch 1"}))
    seeds["metrics-not-strings"] = checkpoint(with_config(metrics_so_far=[1, None]))
    seeds["metrics-newline"] = checkpoint(with_config(metrics_so_far=["epoch 1\nepoch 2"]))
    seeds["metrics-more-than-epochs"] = checkpoint(with_config(metrics_so_far=["epoch 1"]))
    seeds["config-batch-size-0"] = checkpoint(with_config(batch_size=0))
    seeds["config-batch-size-negative"] = checkpoint(with_config(batch_size=-16))
    seeds["config-batch-size-string"] = checkpoint(with_config(batch_size="16"))
    # Data-parallel settings (resume_args and make_train_setup check them before a plan exists).
    seeds["config-grad-blocks-2p30"] = checkpoint(with_config(deterministic=True, grad_blocks=1 << 30))
    seeds["config-bucket-mb-negative"] = checkpoint(with_config(bucket_mb=-1.0))
    seeds["config-deterministic-string"] = checkpoint(with_config(deterministic="yes"))
    seeds["config-not-object"] = checkpoint(ck_text(config_text="7"))
    seeds["ember-checkpoint-not-json"] = checkpoint('{"version":1,')
    for name, b in seeds.items():
        write("checkpoint", name, b)


if __name__ == "__main__":
    idx_corpus()
    model_corpus()
    model_hostile_corpus()
    safetensors_corpus()
    checkpoint_corpus()
