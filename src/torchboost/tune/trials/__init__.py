"""Trials: the user's script run once with one candidate's settings, and the record of it.

The room's parts, each importing only those listed before it::

    trial_result    one trial's figures, plain data (what the search reads)
    check_runs      the end-to-end check's whole runs and what it could not confirm, plain
                    data (what the check fills and a tune's run data holds)
    trial_length    how many steps a trial measures, from the baseline's pace
    trial           one trial in its own observed child process
    journal         every finished trial and end-to-end run, for --resume

Nothing here imports the search or the end-to-end check: they import it.
"""
