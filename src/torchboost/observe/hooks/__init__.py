"""The patches and hooks put into the script's libraries, and taken off again: module,
backward and optimizer hooks (:mod:`.instrument`), the DataLoader patch, the logger filters.

The observed child and the no-code applier (:mod:`torchboost.nocode`) use them; they call
into the recorder and only measure.
"""
