"""The patches and hooks put into the script's libraries, and taken off again: module,
backward and optimizer hooks (:mod:`.instrument`, which installs :mod:`torchboost.reach`'s
DataLoader patch and logger filters too), and the write guard that keeps the user's files.

The observed child uses them; they call into the recorder and only measure.
"""
