"""The write guard, in one room: the user's files are as they were after every run.

Both sides of a run use it (the parent that starts the command, each Python process of
it), and it imports no other room of :mod:`torchboost.process`::

    guard_spec        the contract: what each observed process is told, the journal it leaves
    guard_keeper      the child's bookkeeping: an original kept before its first change
    write_guard       the child's patches: open, os.replace/rename/remove, shutil, torch.save
    folder_snapshot   the parent's picture of the user's folders before the run
    user_files        the parent's settling: originals back, the script's writes kept apart
    run_guard         the parent's guard around one run, and the ledger of many
"""
