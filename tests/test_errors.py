import pytest

from helpers.errors import clean, error_line, short_error


def test_clean_removes_paths_addresses_and_pids():
    text = 'File "/tmp/ipykernel_123/456.py", at 0x7f3a2b1c, DataLoader worker (pid(s) 4242, 4243) exited'
    assert clean(text) == 'File "…/456.py", at 0x…, DataLoader worker (pid(s) N) exited'
    assert (
        clean("Caught ValueError in DataLoader worker process 0.")
        == "Caught ValueError in DataLoader worker process 0."
    )
    assert clean("pid 17 died") == "pid N died"
    assert clean("plain words stay") == "plain words stay"


def test_error_line_joins_a_message_that_starts_on_the_next_line():
    text = "Traceback ...\nRuntimeError: \n        An attempt has been made\n        to start.\n\n  more"
    assert error_line(text) == "RuntimeError: An attempt has been made to start."
    assert error_line("noise\nValueError: bad value\n") == "ValueError: bad value"
    assert error_line("KeyboardInterrupt\n") == "KeyboardInterrupt"
    assert error_line("nothing to see") == ""


def test_short_error_first_and_last_line():
    exc = RuntimeError("\n\nCaught ValueError in worker\nOriginal Traceback\nValueError: at /a/b/c.py")
    assert short_error(exc) == "RuntimeError: Caught ValueError in worker"
    assert short_error(exc, line="last") == "ValueError: at …/c.py"
    assert short_error(ValueError("a\nplain last line"), line="last") == "ValueError: plain last line"
    assert short_error(KeyError()) == "KeyError"


def test_bad_arguments():
    with pytest.raises(TypeError, match="text must be a str"):
        clean(3)
    with pytest.raises(TypeError, match="text must be a str"):
        error_line(None)
    with pytest.raises(TypeError, match="exc must be an exception"):
        short_error("boom")
    with pytest.raises(ValueError, match="line must be 'first' or 'last'"):
        short_error(ValueError("x"), line="middle")


def test_error_line_most_common_survives_interleaved_endings():
    text = "RuntimeError: context has already been set\n" * 3 + "EOFError: Ran out of input\n"
    assert error_line(text) == "EOFError: Ran out of input"
    assert error_line(text, pick="most_common") == "RuntimeError: context has already been set"
    assert error_line("A Error: x\nValueError: a\nKeyError: b\n", pick="most_common") == "ValueError: a"
    with pytest.raises(ValueError, match="pick"):
        error_line("ValueError: a", pick="first")
