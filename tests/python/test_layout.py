# Model.layout (issue 41): a ConvNeXt's predictions and its training in channel-last plans equal the
# nchw plan's within fp32 rounding; switching rebuilds the plan with the same weights; a bad name
# is a ValueError naming the field.
import numpy as np
import pytest

import ember


def test_nhwc_predicts_and_trains_as_nchw():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 255, (16, 3, 32, 32)).astype(np.uint8)
    y = rng.integers(0, 10, 16)
    m = ember.Model.builtin("convnext-atto", input=(3, 32, 32), classes=10)
    assert m.layout == "auto"
    m.layout = "nchw"
    m.fit(x, y, epochs=1, batch_size=8, threads=2)
    a = m.predict(x)
    m.layout = "nhwc"  # the same weights in a channel-last plan
    assert m.layout == "nhwc"
    b = m.predict(x)
    assert np.abs(a - b).max() <= 1e-4 * np.abs(a).max(), np.abs(a - b).max()
    m.fit(x, y, epochs=1, batch_size=8, threads=2)  # trains channel-last too
    assert np.isfinite(m.predict(x)).all()


def test_bad_layout_is_a_value_error():
    m = ember.Model.builtin("convnext-atto", input=(3, 32, 32), classes=10)
    with pytest.raises(ValueError, match="layout: expected auto, nchw or nhwc"):
        m.layout = "chw"
