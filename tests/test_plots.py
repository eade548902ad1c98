import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers import plots  # noqa: E402


def test_speedup_bars_draws_bars_and_limit():
    fig = plots.speedup_bars(["a", "b"], [1.0, 1.9], limit=2, title="t")
    ax = fig.axes[0]
    assert len(ax.patches) == 2
    assert any(line.get_ydata()[0] == 2 for line in ax.get_lines())
    plt.close(fig)


def test_bars_highlight_and_log():
    fig = plots.bars(["x", "y"], [0.1, 2.0], "t", highlight=[False, True], highlight_label="bad", log=True)
    assert fig.axes[0].get_yscale() == "log"
    plt.close(fig)


@pytest.mark.parametrize(
    "labels, values",
    [(["a"], [1.0, 2.0]), ([], []), (["a"], [-1.0]), (["a"], ["1"]), ("ab", [1.0, 2.0])],
)
def test_bad_inputs(labels, values):
    with pytest.raises(ValueError):
        plots.speedup_bars(labels, values, limit=1, title="t")
    with pytest.raises(ValueError):
        plots.bars(labels, values, "t", log=True)


def test_bars_accept_a_slightly_negative_change_on_a_linear_scale():
    fig = plots.bars(["grew", "shrank"], [12.5, -0.02], "t", unit="MB")
    assert fig.axes[0].get_ylim()[0] < 0
    plt.close(fig)
    with pytest.raises(ValueError, match="numbers"):
        plots.bars(["a"], ["1"], "t")


def test_highlight_length_must_match():
    with pytest.raises(ValueError, match="highlight"):
        plots.bars(["a"], [1.0], "t", highlight=[True, False])


def test_curves_smooths_each_series():
    fig = plots.curves({"a": [1.0, 2.0, 3.0, 4.0], "b": [2.0, 2.0]}, "t", smooth=2)
    lines = fig.axes[0].get_lines()
    assert list(lines[0].get_ydata()) == [1.5, 2.5, 3.5] and list(lines[1].get_ydata()) == [2.0]
    plt.close(fig)
    for bad in ({}, {"a": []}):
        with pytest.raises(ValueError):
            plots.curves(bad, "t")
    with pytest.raises(ValueError, match="smooth"):
        plots.curves({"a": [1.0]}, "t", smooth=0)


def test_bar_labels_carry_the_unit_even_with_percent_signs():
    fig = plots.bars(["a", "b"], [3.25, 1234.0], "t", unit="% of steps")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["3.25 % of steps", "1,234 % of steps"]
    plt.close(fig)
