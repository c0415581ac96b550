#!/usr/bin/env python3
"""Runs ONNX's own operator node tests (Debian libonnx-testdata: node/test_*/model.onnx and
test_data_set_0/{input,output}_*.pb) through ember's ONNX importer and Model.predict, for every
single-node test whose op type ember maps, and writes the outcome of each to docs/onnx-node-tests.md.
ember compiles weights at import, so a test's graph inputs 1..k (input_1.pb..input_k.pb) are folded
into initializers first (a temporary copy of the model); input 0 stays the data. It measures only; tests/python/test_onnx_node_tests.py runs it in ctest (Python.Pytest).
Usage: PYTHONPATH=build/release/python python3 scripts/onnx_node_tests.py [--data DIR] [--doc PATH]
       [--no-doc] [--write-passing]   (--write-passing: tests/python/onnx_node_tests_passing.txt from this run)"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.environ.get("EMBER_ONNX_NODE_TESTS", "/usr/share/libonnx-testdata/data/node")  # the env: another copy
DOC = os.path.join(REPO, "docs", "onnx-node-tests.md")
PASSING = os.path.join(REPO, "tests", "python", "onnx_node_tests_passing.txt")
IMPORT_OPS = os.path.join(REPO, "src", "onnx", "onnx_import_ops.cpp")
COMMAND = "PYTHONPATH=build/release/python /usr/bin/python3 scripts/onnx_node_tests.py"
RTOL, ATOL = 1e-4, 1e-5  # atol is relative to max |expected|
PASS, IMPORT_REFUSED, PREDICT_REFUSED, WRONG = "pass", "import refused", "predict refused", "wrong values"

# Op types that ember maps only as a piece of a longer pattern (an op file's ONNX pattern, never the
# op alone): a single-node test of one cannot pass, so they are counted apart, not in the pass rate.
# Derived: a type that appears only in op patterns of several types, that no op maps alone (its
# "onnx_import") and that the importer does not name itself; Constant is named, but is a value (a
# graph of only a Constant has no data input).
VALUE_ONLY = {"Constant": "a value folded into the nodes that read it; a graph of only a Constant has no data input"}

Case = collections.namedtuple("Case", "name op folder")
Result = collections.namedtuple("Result", "name op outcome reason")


def importer_named_ops():
    """Every `op == "..."` of src/onnx/onnx_import_ops.cpp: the op types the importer maps itself
    (constants, pass-throughs, layout views)."""
    with open(IMPORT_OPS, encoding="utf-8") as f:
        return set(re.findall(r'op == "(\w+)"', f.read()))


def mapped_ops(ember):
    """The ONNX op types ember's importer maps: the op table's (ember.ops(): the types of its
    patterns and those its ops map alone) and the importer's own."""
    table = ember.ops()["ops"]
    return sorted({t for o in table for t in o["onnx"] + o["onnx_import"]} | importer_named_ops())


def pattern_pieces(ember):
    """{op type: why} for the mapped types that are only pieces of a pattern (see VALUE_ONLY)."""
    table = ember.ops()["ops"]
    alone = {t for o in table for t in o["onnx_import"]} | importer_named_ops()
    pieces = {t: "only inside the pattern of " + ", ".join(o["name"] for o in table if t in o["onnx"])
              for o in table for t in o["onnx"] if t not in alone}
    pieces.update(VALUE_ONLY)
    return pieces


def node_op(onnx, folder):
    """The op type of a test's model when its graph is one node, else None."""
    nodes = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False).graph.node
    return nodes[0].op_type if len(nodes) == 1 else None


def find_cases(onnx, data, ops):
    """(cases whose single node's op is in ops, how many other test folders there are)."""
    cases, others = [], 0
    for name in sorted(os.listdir(data)):
        folder = os.path.join(data, name)
        if not os.path.isfile(os.path.join(folder, "model.onnx")):
            continue
        op = node_op(onnx, folder)
        if op in ops:
            cases.append(Case(name, op, folder))
        else:
            others += 1
    return cases, others


def load_tensors(onnx, folder, prefix):
    """The arrays of folder/test_data_set_0/PREFIX_K.pb, in K order."""
    from onnx import numpy_helper
    d = os.path.join(folder, "test_data_set_0")
    if not os.path.isdir(d):
        return []
    files = [f for f in os.listdir(d) if re.fullmatch(prefix + r"_\d+\.pb", f)]
    files.sort(key=lambda f: int(f[len(prefix) + 1:-3]))
    return [numpy_helper.to_array(onnx.load_tensor(os.path.join(d, f))) for f in files]


def first_line(e):
    """An error's first line without the model file's path (ember names the file first)."""
    line = (str(e).splitlines() or [type(e).__name__])[0]
    return re.sub(r"^\S*model\.onnx: ", "", line)


def compare(got, want):
    """None when got matches want (same element count; |got - want| <= RTOL |want| + ATOL max |want|),
    else why not. ember's outputs are [N, classes]: an output of the same size is compared reshaped."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.size != want.size:
        return f"output shape {list(got.shape)}, expected {list(want.shape)}"
    got = got.reshape(want.shape)
    scale = float(np.abs(want[np.isfinite(want)]).max()) if np.isfinite(want).any() else 0.0
    if np.allclose(got, want, rtol=RTOL, atol=ATOL * scale, equal_nan=True):
        return None
    diff = np.abs(got - want)
    return f"max |got - expected| {np.nanmax(diff):.2g} (max |expected| {scale:.2g})"


def fold_inputs(onnx, model, xs):
    """model with its graph inputs 1..len(xs)-1 (the non-initializer ones, in order) made initializers
    holding xs[1:]; input 0 stays the data. None when the test feeds more arrays than the graph has
    inputs."""
    from onnx import numpy_helper
    g = model.graph
    inits = {t.name for t in g.initializer}
    data = [i for i in g.input if i.name not in inits]
    if len(xs) > len(data):
        return None
    for vi, x in zip(data[1:len(xs)], xs[1:]):
        g.initializer.append(numpy_helper.from_array(x, vi.name))
        g.input.remove(vi)
    return model


def import_case(ember, onnx, case, xs, tmp):
    """ember's Model of the test's model.onnx, its inputs 1.. folded into initializers (a copy in tmp)."""
    path = os.path.join(case.folder, "model.onnx")
    if len(xs) > 1:
        model = fold_inputs(onnx, onnx.load(path, load_external_data=False), xs)
        if model is None:
            raise ValueError(f"the test feeds {len(xs)} inputs, more than the graph has")
        path = os.path.join(tmp, "model.onnx")
        onnx.save(model, path)
    return ember.Model.from_onnx(path)


def run_case(ember, onnx, case):
    """One test's Result: import model.onnx (inputs 1.. folded), predict input_0, compare with output_0."""
    try:
        xs, wants = load_tensors(onnx, case.folder, "input"), load_tensors(onnx, case.folder, "output")
    except ValueError as e:  # a sequence or an optional, not a tensor
        return Result(case.name, case.op, IMPORT_REFUSED, f"the test data is not a tensor ({first_line(e)})")
    with tempfile.TemporaryDirectory(prefix="ember-node-test-") as tmp:
        try:
            m = import_case(ember, onnx, case, xs, tmp)
        except Exception as e:  # ember.Error; anything else is reported the same way
            return Result(case.name, case.op, IMPORT_REFUSED, first_line(e))
    if not xs:
        return Result(case.name, case.op, PREDICT_REFUSED, "the test feeds no input; Model.predict takes one")
    try:
        got = m.predict(xs[0])
    except Exception as e:
        return Result(case.name, case.op, PREDICT_REFUSED, first_line(e))
    why = compare(got, wants[0]) if len(wants) == 1 else f"the test expects {len(wants)} outputs; ember gives one"
    return Result(case.name, case.op, PASS if why is None else WRONG, why or "")


def run_all(ember, onnx, data=DATA):
    """(results, ops, how many test folders were not run: several nodes, or an op ember does not map,
    {pattern piece op: why})."""
    ops = mapped_ops(ember)
    cases, others = find_cases(onnx, data, set(ops))
    return [run_case(ember, onnx, c) for c in cases], ops, others, pattern_pieces(ember)


def counted(results, pieces):
    """The results of the pass rate: those whose op is not a pattern piece."""
    return [r for r in results if r.op not in pieces]


def summary(results, pieces):
    c = counted(results, pieces)
    passed, extra = sum(r.outcome == PASS for r in c), len(results) - len(c)
    pct = f" ({100 * passed / len(c):.0f} %)" if c else ""
    return (f"ONNX node tests: {passed} of {len(c)}{pct} pass for the ops ember maps"
            f" (and {extra} tests of pattern pieces, not standalone ops, not counted)")


def reason_group(r):
    """A reason with its names ('x', 'data_0') blanked, so the same refusal of two tests groups."""
    return f"{r.outcome}: " + re.sub(r"'[^']*'", "'…'", r.reason)


def reason_counts(results):
    """(count, outcome: reason) of every test that does not pass, most frequent first."""
    c = collections.Counter(reason_group(r) for r in results if r.outcome != PASS)
    return sorted(((n, g) for g, n in c.items()), key=lambda t: (-t[0], t[1]))


def per_op(results):
    """(op, tests, passing) for every op type with a test, by op name."""
    n, p = collections.Counter(r.op for r in results), collections.Counter(r.op for r in results if r.outcome == PASS)
    return [(op, n[op], p[op]) for op in sorted(n)]


def data_version():
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libonnx-testdata"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def md_cell(s):
    return s.replace("|", "\\|")


def doc_head(results, ops, others, pieces, data):
    """The report's header: how it is made, what is run, the pass count."""
    head = ["# ONNX's own node tests through ember's importer", "",
            f"Generated by `{COMMAND}`;",
            "do not edit by hand.", "",
            f"The tests are Debian's libonnx-testdata {data_version()}, `{data}`.",
            "Every test folder whose model is a single node of an ONNX op type ember maps (the op table's",
            "ONNX types and those its ops import alone, `ember info --ops`, and the graph-level op types",
            "src/onnx/onnx_import_ops.cpp names) is imported",
            "with `Model.from_onnx`, its `input_0.pb` run through `Model.predict`, and the result compared",
            f"with `output_0.pb` (rtol {RTOL:g}, atol {ATOL:g} x max |expected|; ember's `[N, classes]` output",
            f"is compared reshaped when the sizes agree). The {others} other test folders (several nodes, or an",
            "op ember does not map) are not run.", "",
            "ember compiles a model's weights at import, so the graph inputs 1..k of a test that feeds",
            "`input_1.pb`..`input_k.pb` (a Gemm's B and C, a Conv's W, a Reshape's shape) are folded into",
            "initializers of those values before the import (a temporary copy of `model.onnx`, written",
            "with the `onnx` package); only input 0 stays the data that `Model.predict` is given.", "",
            f"**{summary(results, pieces)}.**", "",
            "Pattern pieces, not standalone ops: ember maps these op types only as a piece of a longer",
            "pattern (GELU's `Div -> Erf -> Add -> Mul -> Mul`, FastSwish's `Where` of `Greater`/`Less`,",
            "Mish's `Softplus -> Tanh -> Mul`), or as a value, so a single-node test of one cannot pass;",
            "their tests are run and listed below all the same, but not counted in the pass rate:", ""]
    return head + [f"- {op}: {why}" for op, why in sorted(pieces.items())] + ["",
            "tests/python/onnx_node_tests_passing.txt lists the passing ones; the pytest fails when one of",
            "them stops passing.", "",
            "Op types in scope: " + ", ".join(ops) + ".", ""]


def doc_text(results, ops, others, pieces, data):
    """docs/onnx-node-tests.md: the header, tests per op, the refusals grouped by count, every test."""
    out = doc_head(results, ops, others, pieces, data) + ["| op | tests | pass |", "|---|---|---|"]
    out += [f"| {op}{' (pattern piece)' if op in pieces else ''} | {n} | {p} |" for op, n, p in per_op(results)]
    out += ["", "## Why the others fail", "",
            "| tests | outcome: first line of the error (names blanked) |", "|---|---|"]
    out += [f"| {n} | {md_cell(g)} |" for n, g in reason_counts(counted(results, pieces))]
    out += ["", "## Why the pattern pieces fail", "",
            "| tests | outcome: first line of the error (names blanked) |", "|---|---|"]
    out += [f"| {n} | {md_cell(g)} |" for n, g in reason_counts([r for r in results if r.op in pieces])]
    out += ["", "## Every test", "", "| test | op | outcome | reason |", "|---|---|---|---|"]
    out += [f"| {r.name} | {r.op}{' (pattern piece)' if r.op in pieces else ''} | {r.outcome} | {md_cell(r.reason)} |"
            for r in results]
    return "\n".join(out) + "\n"


def write_if_changed(path, text):
    """Writes text to path (through a temporary file, so a concurrent reader never sees half of it)."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def read_passing(path=PASSING):
    """The test names of the passing list (one a line; '#' lines are comments)."""
    with open(path, encoding="utf-8") as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def passing_text(results):
    head = ["# ONNX node tests that pass through ember's importer (docs/onnx-node-tests.md), written by",
            f"# `{COMMAND} --write-passing`;",
            "# tests/python/test_onnx_node_tests.py fails when one of them stops passing."]
    return "\n".join(head + [r.name for r in results if r.outcome == PASS]) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DATA, help=f"the node test folder (default {DATA})")
    ap.add_argument("--doc", default=DOC, help="the report to write (default docs/onnx-node-tests.md)")
    ap.add_argument("--no-doc", action="store_true", help="print the summary and reasons only")
    ap.add_argument("--write-passing", action="store_true", help="write the passing list from this run")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.data):
        sys.exit(f"onnx_node_tests: {a.data}: no such folder (Debian libonnx-testdata; scripts/setup.sh --tests)")
    import ember
    import onnx
    results, ops, others, pieces = run_all(ember, onnx, a.data)
    print(summary(results, pieces))
    for n, g in reason_counts(results):
        print(f"{n:4d}  {g}")
    if not a.no_doc:
        write_if_changed(a.doc, doc_text(results, ops, others, pieces, a.data))
    if a.write_passing:
        write_if_changed(PASSING, passing_text(results))


if __name__ == "__main__":
    main(sys.argv[1:])
