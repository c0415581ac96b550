#!/usr/bin/env bash
# Writes the seed corpora of fuzz_safetensors and fuzz_checkpoint: weights and checkpoints of the
# fuzz-tiny model (fuzz_model_tiny.h) trained by build/release/ember on 64 generated images, plus
# truncated and header-only variants; and fuzz_idx seeds beyond make_corpus.py's (multi-member
# gzip, huge claimed counts). Run from anywhere after building the release preset. The hand-made
# safetensors and checkpoint seeds (deep nesting, duplicate keys, lying sizes and counters) need
# no build: fuzz/make_corpus.py writes them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
ember="$root/build/release/ember"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# fuzz_idx: a valid file gzipped in three members (`cat a.gz b.gz c.gz`, split inside the dims and
# the payload), and headers claiming 5,000,000 images of 28 x 28 (labels: 5,000,000) over 200
# bytes of data, raw and gzip. Needs no build, so it runs first.
/usr/bin/python3 - "$root/fuzz/corpus/idx" <<'PY'
import gzip, os, struct, sys
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
def idx(dims, payload):
    return struct.pack(">I", 0x800 + len(dims)) + b"".join(struct.pack(">I", v) for v in dims) + payload
def pattern(n, x=1):
    out = bytearray()
    for _ in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(x >> 24)
    return bytes(out)
gz = lambda b: gzip.compress(b, compresslevel=9, mtime=0)
small = idx([3, 4, 4], pattern(48, 2))
seeds = {
    "gzip-multi-member": gz(small[:7]) + gz(small[7:30]) + gz(small[30:]),
    "raw-claims-5m": idx([5000000, 28, 28], pattern(200, 3)),
    "gzip-claims-5m": gz(idx([5000000, 28, 28], pattern(200, 3))),
    "labels-claims-5m.gz": gz(idx([5000000], bytes(200))),
}
for name, data in seeds.items():
    open(os.path.join(d, name), "wb").write(data)
PY
/usr/bin/python3 - "$tmp/data" <<'PY'
import os, struct, sys, random
d = sys.argv[1]; os.makedirs(d)
random.seed(1)
for prefix, n in (("train", 64), ("t10k", 16)):
    labels = bytes(random.randrange(10) for _ in range(n))
    pixels = bytes(random.randrange(256) for _ in range(n * 784))
    open(f"{d}/{prefix}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 0x801, n) + labels)
    open(f"{d}/{prefix}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 0x803, n, 28, 28) + pixels)
PY
sed -n 's/.*R"(\(.*\))".*/\1/p' "$root/fuzz/fuzz_model_tiny.h" | tr -d '\n' > "$tmp/tiny.json"
"$ember" train --data "$tmp/data" --model "$tmp/tiny.json" --epochs 1 --batch-size 16 --threads 1 --quiet \
  --checkpoint-every 2 --keep-checkpoints 2 --checkpoint-dir "$tmp/ck" --save "$tmp/w.safetensors" >/dev/null
"$ember" train --data "$tmp/data" --model "$tmp/tiny.json" --epochs 1 --batch-size 16 --threads 1 --quiet \
  --optimizer sgd --checkpoint-every 4 --checkpoint-dir "$tmp/ck-sgd" >/dev/null
st="$root/fuzz/corpus/safetensors" ck="$root/fuzz/corpus/checkpoint"
mkdir -p "$st" "$ck"
cp "$tmp/w.safetensors" "$st/weights"
head -c 200 "$tmp/w.safetensors" > "$st/weights-truncated"
cp "$tmp"/ck/ckpt-0000000002.safetensors "$ck/adam-step2" 2>/dev/null || cp "$(ls "$tmp"/ck/*.safetensors | head -1)" "$ck/adam-step2"
cp "$(ls "$tmp"/ck/*.safetensors | tail -1)" "$ck/adam-last"
cp "$(ls "$tmp"/ck-sgd/*.safetensors | tail -1)" "$ck/sgd-last"
cp "$ck/adam-last" "$st/checkpoint"
head -c 1000 "$ck/adam-last" > "$ck/adam-truncated"
cp "$tmp/w.safetensors" "$ck/weights-not-checkpoint"
printf '\x02\x00\x00\x00\x00\x00\x00\x00{}' > "$st/empty-header"
echo "seeds written to $st and $ck"
ls -la "$st" "$ck"
