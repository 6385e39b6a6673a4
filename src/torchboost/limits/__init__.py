"""The machine's measured limits: how fast its dense matmuls and its memory go.

Public names::

    MachineLimits              what the probe measured (plain data, JSON)
    machine_limits(...)        the cached limits of this machine, measured once when absent
    cached_limits(...)         the cached limits alone, None when absent (never measures)
    measure_limits(...)        run the probe now (a few seconds)
    cpu_theoretical_peak(...)  the fp32 peak the CPU's cores, clock and vector flags allow

:mod:`torchboost.env` says what the machine *can* do (bf16, a GPU, a compiler); this
package measures how *fast* it does it, so the doctor can say how far a step is from that.
"""

from torchboost.limits.cache import cache_dir, cached_limits, machine_key, machine_limits
from torchboost.limits.cpu_peak import CpuPeak, cpu_theoretical_peak
from torchboost.limits.machine import MachineLimits
from torchboost.limits.measure import measure_limits

__all__ = ["CpuPeak", "MachineLimits", "cache_dir", "cached_limits", "cpu_theoretical_peak", "machine_key",
           "machine_limits", "measure_limits"]
