"""Runs every `ember ...` command in README.md's code blocks, in order, as a user would from the
project's root (issue 37: the README named a data path no user has, and nothing ran its commands).
Usage: run_readme_commands.py SOURCE_DIR EMBER_BINARY. Exit 0 when every command ran and exited 0.

The commands run in a scratch copy of the project's layout (build/release/ember, examples/, and
../shared/data/mnist beside it), so their outputs (w.safetensors, ck/, runs/a, ...) land there and
one command can read what an earlier one wrote. Each is shortened with flags a user has (--epochs 1,
--limit-train, --steps, --workloads ...): what is tested is that the command as written runs, not how
long it takes. Placeholders the README uses for the user's own data (cifar-10-batches-bin,
tiny-imagenet-200, DIR, RUN_DIR) get small generated data sets in those formats. A command that names
a path which does not exist, or an absolute path outside /usr/share, fails: the README must only
name paths that exist on any user's machine (relative to the project, or a Debian package's)."""
import gzip
import os
import shlex
import struct
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

TIMEOUT_S = 600
# What `perf script` prints for two samples: the input of `... | ember flamegraph --perf-script -`.
PERF_SCRIPT = ("ember 1/1 [001] 6290.1: 250000 cycles:u: \n"
               "\t 55d4c1e2a3b4 ember::sgemm_avx2(int)+0x40 (/w/build/ember)\n"
               "\t 55d4c1e29000 main+0x20 (/w/build/ember)\n\n"
               "ember 1/1 [001] 6290.2: 250000 cycles:u: \n"
               "\t 55d4c1e29000 main+0x20 (/w/build/ember)\n\n")

# Flags set (or replaced) per command: shorten each run without changing what it does.
SHORTER = {
    "train": {"--epochs": "1", "--limit-train": "256", "--limit-test": "128", "--threads": "2"},
    "eval": {"--limit-test": "128"},
    "profile": {},
    "bench": {"--workloads": "cnn-infer-b1", "--samples": "64"},
    "bench bitnet": {"--input-bits": "32", "--channels": "32", "--segments": "1", "--threads": "1",
                     "--min-time": "0.01", "--no-oracle": None},
    "bench --model": {"--batch-size": "1"},
    "bitnet train": {"--epochs": "1", "--steps": "2", "--limit-train": "512", "--limit-test": "256",
                     "--channels": "64", "--refit-examples": "512", "--refit-rounds": "20"},
}


def code_blocks(readme):
    """The lines of README.md's fenced code blocks, `\\`-continued lines joined."""
    out, inside, pending = [], False, ""
    for line in open(readme, encoding="utf-8"):
        if line.startswith("```"):
            inside = not inside
            continue
        if not inside:
            continue
        line = pending + line.rstrip("\n")
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        out.append(line)
    return out


def ember_commands(lines):
    """Each `build/release/ember ...` command (after `&&` or `|`), comments dropped, as words."""
    cmds = []
    for line in lines:
        if line.startswith(">>>") or line.startswith("..."):
            continue  # Python sessions
        for part in line.replace("&&", "|").split("|"):
            words = shlex.split(part, comments=True)
            if words and words[0] == "build/release/ember":
                cmds.append(words)
    return cmds


def kind(words):
    if words[1:3] == ["bench", "bitnet"] or words[1:3] == ["bitnet", "train"]:
        return " ".join(words[1:3])
    if words[1] == "bench" and "--model" in words:
        return "bench --model"
    return words[1]


def shortened(words):
    if "--help" in words:
        return words
    words = list(words)
    for flag, value in SHORTER.get(kind(words), {}).items():
        if flag in words:
            i = words.index(flag)
            if value is not None:
                words[i + 1] = value
        else:
            words += [flag] if value is None else [flag, value]
    if kind(words) == "train" and "--resume" in words:  # a resumed run goes one epoch further
        words[words.index("--epochs") + 1] = "2"
    return words


def check_paths(words, root):
    """Data and model paths the command reads must exist there; no absolute paths but Debian's."""
    reads = {"--data", "--model", "--weights", "--resume", "--folded"}
    for flag, value in zip(words, words[1:]):
        if value.startswith("/") and not value.startswith("/usr/share/"):
            raise SystemExit(f"README: {' '.join(words)}: absolute path {value} (no user has it)")
        looks_like_path = "/" in value or value.endswith((".json", ".onnx", ".safetensors"))
        if flag in reads and looks_like_path and not os.path.exists(os.path.join(root, value)):
            raise SystemExit(f"README: {' '.join(words)}: {flag} {value} does not exist")
    if words[1] in ("eval", "export", "report") and len(words) > 2 and not words[2].startswith("-"):
        if not os.path.exists(os.path.join(root, words[2])):
            raise SystemExit(f"README: {' '.join(words)}: {words[2]} does not exist")


def write_idx(path, arr, magic):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in arr.shape) + arr.tobytes())


def make_mnist(d, rng):
    os.makedirs(d)
    for split, n in (("train", 512), ("t10k", 256)):
        y = rng.integers(0, 10, n).astype(np.uint8)
        x = rng.integers(0, 64, (n, 28, 28)).astype(np.uint8)
        for i, c in enumerate(y):  # a bright block per class: learnable
            x[i, 2 * c:2 * c + 7, 3:10] = 255
        write_idx(os.path.join(d, f"{split}-images-idx3-ubyte.gz"), x, 0x803)
        write_idx(os.path.join(d, f"{split}-labels-idx1-ubyte.gz"), y, 0x801)


def make_cifar(d, rng):
    os.makedirs(d)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for name in names:
        recs = np.zeros((40, 3073), np.uint8)
        recs[:, 0] = rng.integers(0, 10, 40)
        recs[:, 1:] = rng.integers(0, 256, (40, 3072))
        recs.tofile(os.path.join(d, name))


def save_images(folder, n, size, rng, ext="png"):
    os.makedirs(folder, exist_ok=True)
    for i in range(n):
        px = rng.integers(0, 256, (size, size, 3)).astype(np.uint8)
        Image.fromarray(px).save(os.path.join(folder, f"{i:03d}.{ext}"))


def make_tinyimagenet(d, rng):
    wnids = ["n01443537", "n01629819"]
    os.makedirs(os.path.join(d, "val", "images"))
    with open(os.path.join(d, "wnids.txt"), "w") as f:
        f.write("\n".join(wnids) + "\n")
    for w in wnids:
        save_images(os.path.join(d, "train", w, "images"), 8, 64, rng, "JPEG")
    lines = []
    for i in range(8):
        name = f"val_{i}.JPEG"
        Image.fromarray(rng.integers(0, 256, (64, 64, 3)).astype(np.uint8)).save(os.path.join(d, "val", "images", name))
        lines.append(f"{name}\t{wnids[i % 2]}\t0\t0\t63\t63")
    with open(os.path.join(d, "val", "val_annotations.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def make_folder(d, rng):
    for split, n in (("train", 8), ("test", 4)):
        for c in ("cat", "dog"):
            save_images(os.path.join(d, split, c), n, 40, rng)


def layout(src, binary, tmp):
    """tmp/project (build/release/ember, examples/, the placeholder data sets) and tmp/shared/data/mnist."""
    root = os.path.join(tmp, "project")
    os.makedirs(os.path.join(root, "build", "release"))
    os.symlink(binary, os.path.join(root, "build", "release", "ember"))
    os.symlink(os.path.join(src, "examples"), os.path.join(root, "examples"))
    rng = np.random.default_rng(0)
    mnist = os.path.join(tmp, "shared", "data", "mnist")
    real = os.path.join(src, "..", "shared", "data", "mnist")
    if os.path.isdir(real):
        os.makedirs(os.path.dirname(mnist))
        os.symlink(os.path.realpath(real), mnist)
    else:
        print(f"readme: {real} is absent: a small generated MNIST-format set stands in for it")
        make_mnist(mnist, rng)
    make_cifar(os.path.join(root, "cifar-10-batches-bin"), rng)
    make_tinyimagenet(os.path.join(root, "tiny-imagenet-200"), rng)
    make_folder(os.path.join(root, "DIR"), rng)
    return root


def main():
    src, binary = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
    cmds = ember_commands(code_blocks(os.path.join(src, "README.md")))
    if len(cmds) < 10:
        raise SystemExit(f"README: found only {len(cmds)} ember commands in its code blocks")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = layout(src, binary, tmp)
        for words in cmds:
            words = [w.replace("RUN_DIR", "runs/a") for w in words]
            check_paths(words, root)
            run = shortened(words)
            r = subprocess.run(run, cwd=root, capture_output=True, text=True, timeout=TIMEOUT_S,
                               input=PERF_SCRIPT if "-" in run else "")
            ok = r.returncode == 0
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {' '.join(words)}" + ("" if ok else f"\n  ran: {' '.join(run)}"
                  f"\n  exit {r.returncode}: {r.stderr.strip()[-2000:]}"))
    print(f"{len(cmds) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
