"""pytest of ONNX's own operator node tests (Debian libonnx-testdata) through ember's importer, run by
scripts/onnx_node_tests.py: every test of onnx_node_tests_passing.txt still passes, the harness itself
tells a right output from a wrong one, folds a test's inputs 1.. into initializers, counts the pattern
pieces apart, and each run prints "ONNX node tests: P of N pass for the ops ember maps". It measures;
it never changes the importer."""
import os
import sys

import numpy as np
import pytest

import ember

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import onnx_node_tests as harness  # noqa: E402  (scripts/onnx_node_tests.py)

onnx = pytest.importorskip("onnx", reason="the onnx package (Debian python3-onnx) is not installed")
from onnx import helper, numpy_helper, TensorProto  # noqa: E402

if not os.path.isdir(harness.DATA):
    pytest.skip(f"ONNX node test data not found at {harness.DATA} (Debian libonnx-testdata; "
                "scripts/setup.sh --tests installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def run():
    """(results by test name, results, ops, folders not run, pattern pieces): the whole sweep, once."""
    results, ops, others, pieces = harness.run_all(ember, onnx)
    return {r.name: r for r in results}, results, ops, others, pieces


@pytest.mark.parametrize("name", harness.read_passing())
def test_listed_node_test_still_passes(name, run):
    r = run[0].get(name)
    if r is None:
        pytest.fail(f"{name}: listed in {harness.PASSING} but not run (no such single-node test of a mapped op)")
    assert r.outcome == harness.PASS, f"{name} ({r.op}): {r.outcome}: {r.reason}"


def test_report_is_printed(run, capsys):
    """The summary line is printed; the table is written by `scripts/onnx_node_tests.py` (PYTHONPATH:
    the build's python folder), never by the test: a test run leaves the source tree as it was."""
    _, results, ops, _, pieces = run
    assert len(results) > 0 and all(r.op in ops for r in results)
    with capsys.disabled():
        print(f"\n{harness.summary(results, pieces)} (table: scripts/onnx_node_tests.py writes docs/onnx-node-tests.md)")


def test_pattern_pieces_are_the_ops_mapped_only_inside_a_pattern(run):
    pieces = run[4]
    for op in ("Erf", "Div", "Where", "Greater", "Less", "Softplus", "Constant"):
        assert op in pieces and pieces[op], op
    for op in ("Relu", "Mul", "Add", "Gemm", "Conv", "Tanh", "Sigmoid", "Flatten"):  # each maps alone
        assert op not in pieces, op
    results = run[1]
    assert harness.counted(results, pieces) == [r for r in results if r.op not in pieces]


def gemm_case(tmp_path, fold):
    """A node-test folder of a Gemm whose B and C are graph inputs 1 and 2 fed by input_1.pb and
    input_2.pb (as ONNX's tests feed them); fold False: input_2.pb left out (so C stays data)."""
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5), (5, 4), (4,)))
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in (("a", a), ("b", b), ("c", c))]
    graph = helper.make_graph([helper.make_node("Gemm", ["a", "b", "c"], ["y"])], "gemm", ins,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 4))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "model.onnx"))
    (tmp_path / "test_data_set_0").mkdir()
    arrays = {"input_0.pb": a, "input_1.pb": b, "output_0.pb": a @ b + c} | ({"input_2.pb": c} if fold else {})
    for name, v in arrays.items():
        (tmp_path / "test_data_set_0" / name).write_bytes(numpy_helper.from_array(v).SerializeToString())
    return harness.Case("test_gemm_made_here", "Gemm", str(tmp_path))


def test_harness_folds_inputs_1_to_k_into_initializers(tmp_path):
    (tmp_path / "all").mkdir()
    (tmp_path / "part").mkdir()
    r = harness.run_case(ember, onnx, gemm_case(tmp_path / "all", True))
    assert r.outcome == harness.PASS, r
    before = (tmp_path / "all" / "model.onnx").read_bytes()
    assert len(onnx.load_model_from_string(before).graph.initializer) == 0  # the test's own file is left as it was
    r = harness.run_case(ember, onnx, gemm_case(tmp_path / "part", False))
    assert r.outcome == harness.IMPORT_REFUSED and "'c'" in r.reason, r  # C not fed: still a second input


def flatten_case(tmp_path, want_delta):
    """A node-test folder of one Flatten (which ember imports), its expected output shifted by want_delta."""
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    node = helper.make_node("Flatten", ["x"], ["y"], axis=1)
    graph = helper.make_graph([node], "flatten", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 60))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "model.onnx"))
    (tmp_path / "test_data_set_0").mkdir()
    for name, a in (("input_0.pb", x), ("output_0.pb", x.reshape(2, 60) + want_delta)):
        (tmp_path / "test_data_set_0" / name).write_bytes(numpy_helper.from_array(a).SerializeToString())
    return harness.Case("test_flatten_made_here", "Flatten", str(tmp_path))


def test_harness_passes_a_right_output_and_fails_a_wrong_one(tmp_path):
    (tmp_path / "right").mkdir()
    (tmp_path / "wrong").mkdir()
    right = harness.run_case(ember, onnx, flatten_case(tmp_path / "right", 0.0))
    assert right.outcome == harness.PASS, right
    wrong = harness.run_case(ember, onnx, flatten_case(tmp_path / "wrong", 1e-2))
    assert wrong.outcome == harness.WRONG and "max |got - expected|" in wrong.reason, wrong


def test_compare_checks_shape_and_tolerance():
    want = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    assert harness.compare(want.reshape(3, 4), want) is None
    assert harness.compare(want.reshape(1, 12), want) is None  # ember's [N, classes]: compared reshaped
    assert harness.compare(want[:2], want).startswith("output shape")
    near = want + 0.5 * harness.ATOL  # inside atol x max |expected| (= 1)
    assert harness.compare(near, want) is None
    assert harness.compare(want + 3 * harness.ATOL, want) is not None


def test_refusals_keep_ember_first_line_without_the_path(tmp_path):
    bad = tmp_path / "test_bad"
    bad.mkdir()
    (bad / "model.onnx").write_bytes(b"not a model")
    r = harness.run_case(ember, onnx, harness.Case("test_bad", "Relu", str(bad)))
    assert r.outcome == harness.IMPORT_REFUSED and r.reason, r
    assert "\n" not in r.reason and "model.onnx" not in r.reason, r  # one line, the path left out
