"""The parent side of an observed run: the run asked for (:class:`RunRequest`), the observed
child started through :mod:`torchboost.process` (launched in a group of its own, its
output relayed, waited for), its facts and its tree's collected after it ends.

Imports only :mod:`torchboost.observe.spec` of the other rooms: what the parent knows of
the child is the spec it writes and what the child leaves behind (facts.json, the step
count, the progress line).
"""
