"""Reading the frames on the call stack leaves the script's locals as they were.

The helpers below stand for a script's functions: they hold no assert, since pytest's
rewritten asserts call locals() in the function that holds them.
"""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
import torch

from torchboost.reach import frames
from torchboost.observe.probes.describe import self_on_stack

OLD_LOCALS = not frames.LOCALS_ARE_A_VIEW
"""Before Python 3.13, where reading ``f_locals`` fills the one dict ``locals()`` returns."""


def _logs_its_locals(read):
    lr, epochs = 0.1, 3  # noqa: F841 - the script's hyper-parameters
    hparams = locals()  # logged with each checkpoint, as scripts do
    model = torch.nn.Linear(2, 2)  # noqa: F841
    seen = read(sys._getframe())
    return sorted(hparams), seen


def test_a_function_holding_its_locals_dict_keeps_it_as_it_was():
    kept, seen = _logs_its_locals(frames.frame_locals)
    assert kept == ["epochs", "lr", "read"] and seen == {}


@pytest.mark.skipif(not OLD_LOCALS, reason="f_locals is a view from Python 3.13")
def test_twin_a_plain_f_locals_read_grows_that_dict():
    kept, _ = _logs_its_locals(lambda frame: frame.f_locals)
    assert kept == ["epochs", "hparams", "lr", "model", "read"]  # json.dumps(hparams) would now fail


def _reads_and_forgets(read):
    big = torch.zeros(1024)
    alive = weakref.ref(big)
    saw = "big" in read()  # the reader takes this frame as its caller's, as the observer's hooks do
    del big
    gc.collect()
    return saw, alive() is None


def test_what_was_read_is_freed_with_the_script_s_del():
    assert _reads_and_forgets(lambda: set(frames.frame_locals(sys._getframe(1)))) == (True, True)


@pytest.mark.skipif(not OLD_LOCALS, reason="f_locals is a view from Python 3.13")
def test_twin_a_plain_f_locals_read_keeps_the_tensor_alive():
    assert _reads_and_forgets(lambda: set(sys._getframe(1).f_locals)) == (True, False)


def test_a_module_frame_is_read_through_its_globals():
    scope = {"frames": frames, "sys": sys}
    exec(compile("epochs = 3\nscopes = frames.script_names(sys._getframe())\n", "/home/u/train.py", "exec"), scope)
    assert len(scope["scopes"]) == 1 and scope["scopes"][0] is scope and scope["epochs"] == 3


class _Scaler:
    def step(self, callback):
        return callback()


def test_self_is_read_only_from_the_kind_s_own_methods():
    assert self_on_stack_via(_Scaler()) is not None
    holder = _Scaler()  # noqa: F841 - a script's local of the kind: its frame is not read
    assert _outside_any_method() is None


def self_on_stack_via(scaler):
    return scaler.step(lambda: self_on_stack(_Scaler, 8))


def _outside_any_method():
    self = _Scaler()  # noqa: F841 - named "self", but this is no method of _Scaler's
    return self_on_stack(_Scaler, 8)
