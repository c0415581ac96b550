"""pytest tests of the Python module's argument checks (python/ember_module.cpp): NaN and Inf in
float32 input refused naming the argument and the element (D10), and the training settings checked
by the same library code as the CLI's flags, with ValueErrors naming the argument (D11).
Run: PYTHONPATH=build/release/python /usr/bin/python3 -m pytest tests/python/test_strict_args.py"""
import numpy as np
import pytest

import ember
import test_module  # noqa: E402  (beside this file: pytest puts its folder on sys.path)


def blocks(n, seed=0):
    """test_module's learnable blocks as float32 in [0, 1]."""
    x, y = test_module.blocks(n, seed)
    return x.astype(np.float32) / np.float32(255), y


# D10: NaN in float32 input was read as it was and came out as 0 (predict gave zero logits, fit
# reported the loss ln 10) while Inf was refused; failed before the fix (no error for NaN).
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_float32_input_is_refused_naming_the_element(bad):
    x, y = blocks(40)
    x[7, 0, 3, 4] = bad
    m = ember.Model.builtin("mnist-cnn")
    calls = {"fit": lambda: m.fit(x, y, threads=1), "predict": lambda: m.predict(x),
             "evaluate": lambda: m.evaluate(x, y), "profile": lambda: m.profile(x, y, steps=1, threads=1)}
    for name, call in calls.items():
        with pytest.raises(ValueError, match=r"^x\[7, 0, 3, 4\]: .*(nan|inf)") as e:
            call()
        assert "\n" not in str(e.value), name
    # A grey [N, H, W] array is named by its own indices.
    with pytest.raises(ValueError, match=r"^x\[7, 3, 4\]: "):
        m.predict(x.reshape(40, 28, 28))
    # The model was left usable: the same data without the bad value trains.
    x[7, 0, 3, 4] = 0
    assert np.isfinite(m.fit(x, y, threads=1)[0]["train_loss"])


# D11: lr=nan and lr=-1 silently became the recipe's 0.001, and epochs=-1, batch_size=-1 and
# threads=-1 were accepted; failed before the fix (no error raised).
@pytest.mark.parametrize("kwargs, message", [
    ({"lr": float("nan")}, r"^lr: expected a finite number in \(0, 1000\], found nan"),
    ({"lr": -1.0}, r"^lr: expected a finite number in \(0, 1000\], found -1"),
    ({"lr": float("inf")}, r"^lr: expected a finite number"),
    ({"lr": 5000.0}, r"^lr: expected a finite number in \(0, 1000\], found 5000"),
    ({"epochs": -1}, r"^epochs: expected an integer in \[1, 100000\], found -1"),
    ({"epochs": 0}, r"^epochs: expected an integer in \[1, 100000\], found 0"),
    ({"batch_size": -1}, r"^batch_size: expected an integer in \[1, 65536\], found -1"),
    ({"batch_size": 100000}, r"^batch_size: expected an integer in \[1, 65536\], found 100000"),
    ({"threads": -1}, r"^threads: expected an integer in \[1, 256\], found -1"),
    ({"threads": 1000}, r"^threads: expected an integer in \[1, 256\], found 1000"),
])
def test_fit_settings_are_checked_like_the_cli_flags(kwargs, message):
    x, y = blocks(20)
    m = ember.Model.builtin("mnist-mlp")
    with pytest.raises(ValueError, match=message):
        m.fit(x, y, **kwargs)
    # Nothing was trained: the model still trains with good settings afterwards.
    assert len(m.fit(x, y, epochs=1, threads=1)) == 1


# D11: predict, evaluate and profile took batch_size -1 and threads -1 as "the default"; failed
# before the fix.
def test_predict_evaluate_and_profile_check_their_settings():
    x, y = blocks(20)
    m = ember.Model.builtin("mnist-mlp")
    for call in (lambda: m.predict(x, batch_size=-1), lambda: m.evaluate(x, y, batch_size=-5),
                 lambda: m.profile(x, y, steps=1, batch_size=-1)):
        with pytest.raises(ValueError, match=r"^batch_size: expected an integer in \[1, 65536\]"):
            call()
    with pytest.raises(ValueError, match=r"^threads: expected an integer in \[1, 256\], found -2"):
        m.profile(x, y, steps=1, threads=-2)
    # 0 keeps meaning "the default" (the documented signature's value).
    assert m.predict(x, batch_size=0).shape == (20, 10)


# D11: a short y was reported as "found 1 dimensions"; failed before the fix.
def test_a_short_y_says_how_many_labels_were_expected_and_found():
    x, y = blocks(50)
    m = ember.Model.builtin("mnist-mlp")
    with pytest.raises(ValueError, match=r"^y: expected 50 labels \(one per sample of x\), found 49$"):
        m.fit(x, y[:49])
    with pytest.raises(ValueError, match=r"^y: expected 50 labels .*found a 2-dimensional array \[50, 1\]"):
        m.evaluate(x, y.reshape(50, 1))


# D11: from_json given a long text echoed it whole in the error (a 2 MB message); failed before
# the fix. Quoted user text is cut to about 60 characters.
def test_from_json_errors_quote_at_most_a_few_dozen_characters(tmp_path):
    big_array = "[" + ",".join(["1"] * 700000) + "]"  # JSON text, but not a model: no '{'
    big_name = '{"name": 1, "layers": [], "x": "' + "y" * 2000000 + '"}'
    for arg in (big_array, big_name, "z" * 5000):  # 5000 bytes: longer than any path can be
        with pytest.raises((ember.Error, ValueError)) as e:
            ember.Model.from_json(arg)
        assert len(str(e.value)) < 400, str(e.value)[:500]
        assert "\n" not in str(e.value)
    # A path that could be one is named whole: the user needs to see which file is missing.
    path = str(tmp_path / ("d" * 100) / "net.json")
    with pytest.raises(ember.Error, match="net.json'") as e:
        ember.Model.from_json(path)
    assert path in str(e.value)
    with pytest.raises(ValueError, match=r"optimizer: expected sgd, .* found 'aaaa.*\(10000 bytes\)"):
        m = ember.Model.builtin("mnist-mlp")
        x, y = blocks(10)
        m.fit(x, y, optimizer="a" * 10000)
