import pytest

from helpers.validate import non_negative, positive_int


def test_positive_int():
    assert positive_int("n", 3) == 3
    assert positive_int("n", 0, minimum=0) == 0
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        positive_int("n", 0)
    for bad in (True, 1.0, "1", None):
        with pytest.raises(TypeError, match="n must be an int"):
            positive_int("n", bad)


def test_non_negative():
    assert non_negative("delay", 0) == 0.0 and non_negative("delay", 0.5) == 0.5
    for bad, error in ((-0.1, ValueError), (float("nan"), ValueError), (True, TypeError), ("1", TypeError)):
        with pytest.raises(error, match="delay"):
            non_negative("delay", bad)
