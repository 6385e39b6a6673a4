"""A filter torchboost puts on a library's logger (compile's, on dynamo's) leaves when observation ends."""

from __future__ import annotations

import logging

import pytest
from torch import nn

from torchboost.observe import Instrumentation, ObserveSpec, StepRecorder
from torchboost.nocode import Applier
from torchboost.plan import Plan
from torchboost.reach.log_filters import LoggerFilters, torchboost_filters
from torchboost.techniques.compile import apply_compile


@pytest.fixture
def no_filters_of_ours():
    """Start with none of our filters on any logger (an earlier test may have compiled), and
    put back what was there afterwards."""
    found = torchboost_filters()
    for name, log_filter in found:
        logging.getLogger(name).removeFilter(log_filter)
    yield
    for name, log_filter in torchboost_filters():
        logging.getLogger(name).removeFilter(log_filter)
    for name, log_filter in found:
        logging.getLogger(name).addFilter(log_filter)


def _compile_a_model() -> None:
    # Compilation is lazy: this attaches compile's filter to dynamo's logger and compiles nothing.
    apply_compile(nn.Linear(2, 2), mode="default", scope="model")


def test_compiles_filter_is_on_dynamos_logger_while_recording_and_gone_after(tmp_path, no_filters_of_ours):
    inst = Instrumentation(StepRecorder(ObserveSpec(out_dir=str(tmp_path), profile_active=0))).install()
    try:
        _compile_a_model()
        during = torchboost_filters()
        # The twin: while recording the filter is there (so the check below has something to miss).
        assert during and all(name.startswith("torch._dynamo") for name, _ in during)
    finally:
        inst.uninstall()
    assert torchboost_filters() == []


def test_the_no_code_applier_takes_it_off_too(no_filters_of_ours):
    applier = Applier(Plan.applying({"loader.num_workers": 0})).install()
    _compile_a_model()
    assert torchboost_filters() != []
    applier.uninstall()
    assert torchboost_filters() == []


def test_filters_that_were_there_before_and_the_scripts_own_stay(no_filters_of_ours):
    _compile_a_model()  # ours, attached before observation started
    before = torchboost_filters()
    users = logging.Filter("user")
    logger = logging.getLogger("torch._dynamo.convert_frame")
    guard = LoggerFilters().start()
    logger.addFilter(users)
    try:
        guard.release()
        assert torchboost_filters() == before and users in logger.filters
    finally:
        logger.removeFilter(users)
