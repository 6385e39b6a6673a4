"""The plain data the stages pass each other, and the arithmetic the rules share.

``observe`` records :class:`Facts`; each technique's rules and ``diagnose``'s own turn
them into :class:`Finding` s; ``tune`` and ``report`` read both. The package sits below
every stage and below the technique modules (which declare their facts and rules with
it), so it imports none of them; a finding's fix is a partial configuration that the
techniques' own spellings render (:mod:`torchboost.frameworks`).
"""
