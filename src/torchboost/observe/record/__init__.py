"""What an observed run records: step times, losses, the script's objects, the run's
stages, the facts built from those parts, and the files written as it goes.

Uses the probes and the spec; never the hooks, the child or the parent.
"""
