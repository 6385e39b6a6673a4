"""The write guard, in one room: the user's files are as they were after every run.

Both sides of a run use it (the parent that starts the command, each Python process of
it), and it imports no other room of :mod:`torchboost.process`::

    guard_spec        the contract: what each observed process is told, the journal it leaves
    guard_keeper      the child's bookkeeping: an original kept before its first change
    birth_time        when a file was made, where the filesystem keeps it (statx)
    writers           what the child's guard reaches: open and its aliases, os, shutil, sqlite3, torch's savers
    write_guard       the child's patches around those, started with the process
    folder_snapshot   the parent's picture of the user's folders before the run
    held_files        files the run's processes held open for writing: what changed past the guard
    user_writes       what settling found, as plain data, and its one line
    user_files        the parent's settling: originals back, the script's writes kept apart
    earlier_run       what an earlier run left: settled if it never was, kept if it may be the user's
    run_guard         the parent's guard around one run, and the ledger of many

The guard's own modules (guard_spec, guard_keeper, birth_time, writers, write_guard) use the standard
library alone, so that a process can start its guard before it imports torch.
"""
