#!/usr/bin/python3
"""Writes the seed corpus of fuzz_onnx (fuzz/corpus/onnx/): tiny ONNX models made with onnx.helper
that cover each op and pattern the importer maps (Conv, Gemm, MatMul + bias over a channels-last
view, LayerNormalization, GELU's erf and tanh chains, FastSwish, x * sigmoid(x), pools, Pad with
folded pads, Sum, Concat, Softmax) in a few hundred bytes each. Run: /usr/bin/python3 fuzz/make_onnx_corpus.py"""
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


def save(name, nodes, inits, in_shape, out_dim, opset=17):
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", out_dim])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    with open(os.path.join(OUT, name + ".onnx"), "wb") as f:
        f.write(m.SerializeToString())


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
    print(f"wrote {len(os.listdir(OUT))} models to {OUT}")


if __name__ == "__main__":
    main()
