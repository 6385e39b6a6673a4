"""Probes of the live script: the profiler window, FLOP and byte counts, the replay of
seen batches, the quick probes of switchable fixes, descriptions of the model, optimizer
and a Hugging Face Trainer, the script's planned length, what each optimizer steps.

The bottom room: imports no other part of observe but the spec.
"""
