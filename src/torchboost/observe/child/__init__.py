"""The observed child process itself: the entry module that runs the user's script
(:mod:`.bootstrap`), the stall watchdog and its "is it compiling?" check.

Uses the hooks, the recorder and the spec; nothing below imports it.
"""
