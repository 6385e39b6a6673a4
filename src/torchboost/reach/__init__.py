"""How torchboost reaches into a running script, shared by the observer and the no-code applier.

Below both :mod:`torchboost.observe` (which watches the script) and :mod:`torchboost.nocode`
(which applies ``torchboost.toml`` to it from outside), so each imports it and neither the
other::

    loader_patch     DataLoader construction: its arguments seen, and rewritten
    log_filters      filters on a library's loggers, taken off again
    frames           the script's frames on the stack, read without changing them
    optimizer_owner  the module whose parameters an optimizer steps (reads the frames)
"""
