"""The parent side of an observed run: the command understood, the child started in a
process group of its own, its output relayed, its facts collected after it ends.

Imports only :mod:`torchboost.observe.spec` of the other rooms: what the parent knows of
the child is the spec it writes and what the child leaves behind (facts.json, the step
count, the progress line).
"""
