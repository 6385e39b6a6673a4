"""Running the user's command: launched, supervised, its output relayed, its files kept.

What ``torchboost run``, ``compare``, the doctor and tune's trials share, none of it
observing anything (the observer, :mod:`torchboost.observe`, stands above and uses it)::

    launch          the command understood: one Python process, a torchrun job, a tree
    target          the script run here as ``__main__``, as python runs it; a stop raised where it is
    process_group   a child in a group of its own; signals passed on; what is left, ended
    no_stdin        the child gets no stdin, and its failure for want of one is named
    relay           the child's output copied to ours, its tail kept
    wait            the wait: a time limit, progress shown, a tree that goes on after training
    as_typed        a command run as typed (a torchrun job, a launcher's tree), signals passed on
    tree_spec       every Python process of a command's tree: the start-up hook's spec and
    tree_start      environment, and what each process starts (guard, settings, observer)
    inject/         the start-up hook itself (standard library only)
    guard/          the write guard, both sides: the user's files as they were after every run
    guarded         a whole run under the guard, not observed (tune's end-to-end check)

Imports flow down this package and out of it only to what stands below it (the no-code
applier, :mod:`torchboost.nocode`; the plan's hand-over, :mod:`torchboost.handover`).
An observer is named, never imported: the tree's spec carries its module's name, as the
observed child's module is named on its command line.
"""
