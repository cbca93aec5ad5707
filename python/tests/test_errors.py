"""Errors from Python come back as clear Python exceptions, never a crash."""

import numpy as np
import pytest

import dropmc

from implementations import Correct

P = 0.3


class MyBug(Exception):
    pass


def test_an_exception_inside_forward_is_re_raised_as_is():
    calls = []

    def forward(x, training):
        calls.append(x.shape)
        if len(calls) == 3:
            raise MyBug("boom in forward")
        return Correct(P).forward(x, training)

    with pytest.raises(MyBug, match="boom in forward"):
        dropmc.check_dropout(forward, P)
    # The run stopped at the failing call: no further calls into Python.
    assert len(calls) == 3


def test_an_exception_inside_backward_is_re_raised():
    layer = Correct(P)

    def backward(x, grad, training):
        raise KeyError("no cached mask")

    with pytest.raises(KeyError, match="no cached mask"):
        dropmc.check_dropout(layer.forward, P, backward=backward, samples=50_000)


def test_a_wrong_shape_is_a_value_error():
    with pytest.raises(ValueError, match=r"shape \(.*\), expected"):
        dropmc.check_dropout(lambda x, t: x[:, :-1], P)
    with pytest.raises(ValueError, match="shape"):
        dropmc.check_dropout(lambda x, t: x.ravel(), P)


def test_a_wrong_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="dtype float32, expected float64"):
        dropmc.check_dropout(lambda x, t: x.astype(np.float32), P)
    with pytest.raises(TypeError, match="dtype float64, expected float32"):
        dropmc.check_dropout(lambda x, t: x.astype(np.float64), P, dtype=np.float32)


def test_none_or_a_non_array_is_a_type_error():
    with pytest.raises(TypeError, match="returned None"):
        dropmc.check_dropout(lambda x, t: None, P)
    with pytest.raises((TypeError, ValueError)):
        dropmc.check_dropout(lambda x, t: "not an array", P)


def test_nan_output_is_a_value_error():
    def forward(x, training):
        out = Correct(P).forward(x, training).copy()
        out[0, 1] = np.nan
        return out

    with pytest.raises(ValueError, match="NaN"):
        dropmc.check_dropout(forward, P)


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, float("nan"), float("inf")])
def test_a_rate_outside_0_1_is_a_value_error(p):
    with pytest.raises(ValueError, match="0 <= p < 1"):
        dropmc.check_dropout(Correct(0.1).forward, p)


def test_bad_arguments_are_clear():
    with pytest.raises(TypeError, match="callable"):
        dropmc.check_dropout("forward", P)
    with pytest.raises(TypeError, match="float64, float32, float16, bfloat16"):
        dropmc.check_dropout(Correct(P).forward, P, dtype=np.int32)
    with pytest.raises(ValueError, match="samples"):
        dropmc.check_dropout(Correct(P).forward, P, samples=1)
    with pytest.raises(ValueError, match="finite"):
        dropmc.check_dropout(Correct(P).forward, P, x=[1.0, np.inf])
    with pytest.raises(ValueError, match="1-D"):
        dropmc.check_dropout(Correct(P).forward, P, x=[[1.0, 2.0]])


def test_the_interpreter_survives_and_works_after_errors():
    with pytest.raises(MyBug):
        dropmc.check_dropout(lambda x, t: (_ for _ in ()).throw(MyBug("x")), P)
    layer = Correct(P, seed=3)
    assert dropmc.check_dropout(layer.forward, P, samples=50_000, backward=False).passed


def test_callables_run_on_the_calling_thread_and_ctrl_c_interrupts():
    import _thread
    import threading

    main = threading.get_ident()
    seen = set()
    calls = []

    def forward(x, training):
        seen.add(threading.get_ident())
        calls.append(1)
        if len(calls) == 4:
            _thread.interrupt_main()  # what Ctrl-C does
        return Correct(P).forward(x, training)

    with pytest.raises(KeyboardInterrupt):
        dropmc.check_dropout(forward, P)
    assert seen == {main}
    assert len(calls) <= 6
    # A second run from the same thread, and one from another thread, work.
    assert dropmc.check_dropout(Correct(P, seed=8).forward, P, samples=50_000, backward=False).passed
    out = []
    t = threading.Thread(target=lambda: out.append(dropmc.check_dropout(Correct(P, seed=9).forward, P, samples=50_000, backward=False).passed))
    t.start()
    t.join()
    assert out == [True]
