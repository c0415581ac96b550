#!/usr/bin/python3
"""Writes the seed corpus of fuzz_onnx (fuzz/corpus/onnx/): tiny ONNX models made with onnx.helper
that cover each op and pattern the importer maps (Conv, Gemm, MatMul + bias over a channels-last
view, LayerNormalization, GELU's erf and tanh chains, FastSwish, x * sigmoid(x), pools, Pad with
folded pads, Sum, Concat, Softmax) in a few hundred bytes each; big node counts (a Relu chain one
layer over the 4096-layer limit, 49,000 empty nodes, lengths that claim more than the file holds)
under 100 KB each; one regression seed per refused hostile model of issue 37 (ir_version 999,
Conv strides 0, a graph output with no type or the wrong shape, no output); issue 40's attribute
mappings and an unknown auto_pad; [N, C, L] data and pools padded after unlike before; a tiny QDQ
conv and the hostile-input report's (2026-12-01) refused graphs: a DequantizeLinear with another
scale than its QuantizeLinear's, a duplicate scale initializer, two nodes writing one tensor, a
cycle, a negative BatchNormalization variance.
Run: /usr/bin/python3 fuzz/make_onnx_corpus.py"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "onnx")
rng = np.random.default_rng(1)


def w(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def c(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def save(name, nodes, inits, in_shape, out_dim, opset=17, outputs=None, ir_version=8, check=True, ext=".onnx"):
    if outputs is None:
        outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", out_dim])]
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])],
                          outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    if check:
        onnx.checker.check_model(m)
    write(name + ext, m.SerializeToString())


def write(name, data):
    assert len(data) < 100_000, (name, len(data))  # kept in git
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def varint(n):
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def big_counts():
    """Big node counts in small files (fuzz_onnx also scans each input under limits 64 times
    smaller, so these cross them): 4097 Relu layers, one over a model's 4096 (names of 2-4
    characters keep it under 100 KB); 49,000 empty nodes (2 bytes each: 65,537 would not fit in
    100 KB); a graph and a node whose lengths claim 2^62 bytes."""
    N = helper.make_node
    names = ["v" + np.base_repr(k, 36).lower() for k in range(4098)]
    save("layers-4097", [N("Relu", ["x" if k == 0 else names[k]], ["y" if k == 4096 else names[k + 1]]) for k in range(4097)],
         [], [4], 4, ext="")
    head = bytes([0x08, 8]) + bytes([0x42]) + varint(2) + bytes([0x10, 17])   # ir_version 8, opset_import {version 17}
    empty = bytes([0x0A, 0]) * 49000                                            # GraphProto.node {} x 49,000
    write("empty-nodes-49000", head + bytes([0x3A]) + varint(len(empty)) + empty)
    node = bytes([0x0A]) + varint(1 << 62) + b"\x0a\x01x"                     # GraphProto.node claiming 2^62 bytes
    write("claims-2e62", head + bytes([0x3A]) + varint(1 << 62) + node)


def regressions():
    """One seed per hostile model of issue 37 that is now refused. Hostile seeds have no .onnx
    suffix: tests/python/test_onnx.py runs every *.onnx seed in ONNX Runtime."""
    N = helper.make_node
    gemm = [N("Flatten", ["x"], ["f"]), N("Gemm", ["f", "fc.weight"], ["y"], transB=1)]
    inits = [w("fc.weight", 3, 4)]
    save("regress-ir-version-999", gemm, inits, [4], 3, ir_version=999, check=False, ext="")
    save("regress-conv-strides-0", [N("Conv", ["x", "c.weight"], ["c"], kernel_shape=[3, 3], strides=[0, 1]),
                                    N("GlobalAveragePool", ["c"], ["p"]), N("Flatten", ["p"], ["y"])],
         [w("c.weight", 2, 1, 3, 3)], [1, 4, 4], 2, check=False, ext="")
    save("regress-output-untyped", gemm, inits, [4], 3, outputs=[helper.make_empty_tensor_value_info("y")], check=False,
         ext="")
    save("regress-output-wrong-shape", gemm, inits, [4], 3,
         outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 7])], ext="")
    save("regress-no-output", gemm, inits, [4], 3, outputs=[], check=False, ext="")


def attributes():
    """Issue 40's attribute mappings (after the others, so their seeds keep their random weights):
    Gemm's alpha, beta and a scalar C, Conv's auto_pad SAME_UPPER at stride 2 (symmetric on 7x7),
    MaxPool's ceil_mode that adds no window, AveragePool's VALID, Flatten axis -3; and a hostile
    auto_pad string."""
    N = helper.make_node
    save("attrs", [N("Conv", ["x", "c.weight", "c.bias"], ["c"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
                   N("MaxPool", ["c"], ["m"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
                   N("AveragePool", ["m"], ["a"], kernel_shape=[1, 1], auto_pad="VALID"),
                   N("Flatten", ["a"], ["f"], axis=-3),
                   N("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], alpha=0.5, beta=2.0, transB=1)],
         [w("c.weight", 3, 2, 3, 3), w("c.bias", 3), w("fc.weight", 4, 12), w("fc.bias")], [2, 7, 7], 4)
    save("regress-auto-pad-unknown", [N("Conv", ["x", "c.weight"], ["c"], kernel_shape=[3, 3], auto_pad="SAME_MIDDLE"),
                                      N("GlobalAveragePool", ["c"], ["p"]), N("Flatten", ["p"], ["y"])],
         [w("c.weight", 2, 1, 3, 3)], [1, 4, 4], 2, check=False, ext="")


def sequences():
    """[N, C, L] data (ember's [C, 1, L]): a 1-D Conv, BatchNormalization, a MaxPool with 1-D pads
    after unlike before and ceil_mode; then a 2-D AveragePool with pads [0, 1, 2, 0] on a 2-D input."""
    N = helper.make_node
    save("seq", [N("Conv", ["x", "c.weight", "c.bias"], ["c"], kernel_shape=[3], pads=[1, 1]),
                 N("BatchNormalization", ["c", "bn.weight", "bn.bias", "bn.mean", "bn.var"], ["n"]),
                 N("MaxPool", ["n"], ["m"], kernel_shape=[3], strides=[2], pads=[0, 1], ceil_mode=1),
                 N("Flatten", ["m"], ["f"]), N("Gemm", ["f", "fc.weight"], ["y"], transB=1)],
         [w("c.weight", 3, 2, 3), w("c.bias", 3), w("bn.weight", 3), w("bn.bias", 3), w("bn.mean", 3),
          numpy_helper.from_array(np.full(3, 1.5, np.float32), "bn.var"), w("fc.weight", 2, 15)], [2, 9], 2)
    save("pool-pads-after", [N("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 2, 0]),
                             N("Flatten", ["a"], ["y"])], [], [1, 5, 6], 9)


def hostile_2026_12():
    """A QDQ conv (x -> Q -> DQ -> Conv with DQ'd int8 weights -> Flatten; no .onnx suffix: ORT
    rounds where ember's fp32 import does not) and the hostile-input report's (2026-12-01) refused
    graphs: H1 its DequantizeLinear reading 10x the scale, M1 a second 'xs' initializer, M2 a Relu
    and a Sigmoid both writing 'y', M7 two Relus reading each other, L6 a BatchNormalization var -1."""
    N = helper.make_node

    def qdq(name, dq_scale="xs", extra=()):
        nodes = [N("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q"), N("DequantizeLinear", ["xq", dq_scale, "xz"], ["xd"], name="dq"),
                 N("DequantizeLinear", ["w", "ws"], ["wd"], axis=0), N("Conv", ["xd", "wd"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                 N("Flatten", ["c"], ["y"])]
        inits = [c("xs", 0.01, np.float32), c("xz", 0, np.uint8), c("ws", [0.1, 0.2], np.float32),
                 c("w", (np.arange(18) * 37 % 255 - 127).reshape(2, 1, 3, 3), np.int8), *extra]
        save(name, nodes, inits, [1, 4, 4], 32, opset=13, check=not extra, ext="")

    qdq("qdq-conv")
    qdq("regress-qdq-dq-other-scale", "xs10", [c("xs10", 0.1, np.float32)])
    qdq("regress-qdq-dup-scale", extra=[c("xs", 0.5, np.float32)])
    save("regress-dup-output", [N("Relu", ["x"], ["y"]), N("Sigmoid", ["x"], ["y"])], [], [3], 3, check=False, ext="")
    save("regress-cycle", [N("Flatten", ["x"], ["f"]), N("Relu", ["b"], ["a"]), N("Relu", ["a"], ["b"]),
                           N("Gemm", ["a", "fc.weight"], ["y"], transB=1)], [w("fc.weight", 3, 4)], [4], 3, check=False, ext="")
    save("regress-bn-var-negative", [N("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"]), N("Flatten", ["n"], ["y"])],
         [c("s", [1, 1], np.float32), c("b", [0, 0], np.float32), c("m", [0, 0], np.float32), c("v", [1, -1], np.float32)],
         [2, 1, 1], 2, ext="")


def main():
    os.makedirs(OUT, exist_ok=True)
    N = helper.make_node
    save("cnn", [N("Conv", ["x", "c.weight", "c.bias"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                 N("Relu", ["a"], ["b"]), N("MaxPool", ["b"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                 N("Flatten", ["p"], ["f"]), N("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1)],
         [w("c.weight", 2, 1, 3, 3), w("c.bias", 2), w("fc.weight", 3, 8), w("fc.bias", 3)], [1, 4, 4], 3)
    save("block", [N("Conv", ["x", "dw.weight", "dw.bias"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=2),
                   N("Transpose", ["a"], ["t"], perm=[0, 2, 3, 1]),
                   N("LayerNormalization", ["t", "ln.weight", "ln.bias"], ["l"], axis=-1, epsilon=1e-6),
                   N("MatMul", ["l", "mm"], ["m"]), N("Add", ["fc1.bias", "m"], ["mb"]),
                   N("Div", ["mb", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]), N("Add", ["e", "one"], ["e1"]),
                   N("Mul", ["mb", "e1"], ["g"]), N("Mul", ["g", "half"], ["h"]),
                   N("Transpose", ["h"], ["back"], perm=[0, 3, 1, 2]), N("Mul", ["back", "ls.layer_scale"], ["s"]),
                   N("Sum", ["s", "x"], ["r"]), N("GlobalAveragePool", ["r"], ["gp"]), N("Flatten", ["gp"], ["f"]),
                   N("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1)],
         [w("dw.weight", 2, 1, 3, 3), w("dw.bias", 2), w("ln.weight", 2), w("ln.bias", 2), w("mm", 2, 2),
          w("fc1.bias", 2), c("sqrt2", 1.4142135, np.float32), c("one", 1.0, np.float32), c("half", 0.5, np.float32),
          w("ls.layer_scale", 2, 1, 1), w("fc.weight", 3, 2), w("fc.bias", 3)], [2, 3, 3], 3)
    save("pad", [N("ConstantOfShape", ["four"], ["z"], value=numpy_helper.from_array(np.array([0], np.int64))),
                 N("Concat", ["p2", "z"], ["cat"], axis=0), N("Reshape", ["cat", "m12"], ["r"]),
                 N("Slice", ["r", "sm1", "big", "s0", "sm1"], ["sl"]), N("Transpose", ["sl"], ["tr"], perm=[1, 0]),
                 N("Reshape", ["tr", "m1"], ["flat"]), N("Cast", ["flat"], ["pads"], to=7),
                 N("Pad", ["x", "pads"], ["xp"], mode="constant"),
                 N("AveragePool", ["xp"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
                 N("Sigmoid", ["a"], ["sg"]), N("Mul", ["a", "sg"], ["si"]),
                 N("LayerNormalization", ["si", "ln.weight", "ln.bias"], ["l"], axis=1),
                 N("Flatten", ["l"], ["f"]), N("MatMul", ["f", "mm"], ["y"])],
         [c("four", [4]), c("p2", [1, 1, 1, 1]), c("m12", [-1, 2]), c("sm1", [-1]), c("big", [-(2 ** 63) + 1]),
          c("s0", [0]), c("m1", [-1]), w("ln.weight", 1, 2, 2), w("ln.bias", 1, 2, 2), w("mm", 4, 3)], [1, 2, 2], 3)
    save("mlp", [N("Flatten", ["x"], ["f"]), N("Gemm", ["f", "a.weight", "a.bias"], ["h"], transB=1),
                 N("Tanh", ["h"], ["t"]), N("HardSwish", ["t"], ["hs"]),
                 N("Concat", ["hs", "t"], ["cc"], axis=1), N("Gemm", ["cc", "b"], ["z"]),
                 N("Softmax", ["z"], ["y"], axis=-1)],
         [w("a.weight", 4, 6), w("a.bias", 4), w("b", 8, 3)], [1, 2, 3], 3)
    x = "h"  # GELU's tanh form in torch.onnx's operand order, then the study's FastSwish (torch's Reciprocal form)
    gelu_tanh = [N("Mul", [x, x], ["g1"]), N("Mul", [x, "g1"], ["g2"]), N("Mul", ["k1", "g2"], ["g3"]),
                 N("Add", [x, "g3"], ["g4"]), N("Mul", ["k2", "g4"], ["g5"]), N("Tanh", ["g5"], ["g6"]),
                 N("Add", ["one", "g6"], ["g7"]), N("Mul", [x, "g7"], ["g8"]), N("Mul", ["half", "g8"], ["g"])]
    fastswish = [N("Add", ["g", "a"], ["f1"]), N("Mul", ["g", "f1"], ["f2"]), N("Div", ["f2", "a3"], ["mid"]),
                 N("Greater", ["g", "three"], ["gt"]), N("Less", ["g", "mthree"], ["lt"]), N("Mul", ["g", "g"], ["sq"]),
                 N("Reciprocal", ["sq"], ["rc"]), N("Mul", ["rc", "mone"], ["low"]),
                 N("Where", ["lt", "low", "mid"], ["w1"]), N("Where", ["gt", "g", "w1"], ["f"])]
    scalar = lambda name, v: c(name, v, np.float32)  # noqa: E731
    save("acts", [N("Flatten", ["x"], ["fl"]), N("Gemm", ["fl", "a.weight", "a.bias"], [x], transB=1)] + gelu_tanh + fastswish +
         [N("Gemm", ["f", "b.weight", "b.bias"], ["y"], transB=1)],
         [w("a.weight", 6, 4), w("a.bias", 6), w("b.weight", 3, 6), w("b.bias", 3), scalar("k1", 0.044715),
          scalar("k2", 0.7978845608), scalar("one", 1.0), scalar("half", 0.5), scalar("a", 3.2308), scalar("a3", 6.2308),
          scalar("three", 3.0), scalar("mthree", -3.0), scalar("mone", -1.0)], [1, 2, 2], 3)
    big_counts()
    regressions()
    attributes()
    sequences()
    hostile_2026_12()
    print(f"wrote {len(os.listdir(OUT))} models to {OUT}")


if __name__ == "__main__":
    main()
