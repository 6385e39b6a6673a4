"""Environment probe: the one module that asks the hardware and the installation what they can do.

Every capability question torchboost asks (is there a GPU, does it do bf16, can Inductor
compile here, how many cores are ours) is answered here, once, into a plain
:class:`Environment` that serialises to JSON. Nothing else probes hardware.

torchrun's variables (:data:`DIST_ENV_VARS`) are read here alone too: :func:`rank`,
:func:`world_size` and :func:`is_torchrun_rank` for this process now, and the
:class:`Environment`'s ``rank``/``local_rank``/``world_size``/``local_world_size`` for
the probed snapshot. No other module names them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import psutil
import torch

__all__ = ["BUSY_PCT", "posix_processes", "tree_cpu_s", "Environment", "probe", "measure_cpu_bf16_speedup", "DIST_ENV_VARS", "torchrun_env", "rank",
           "world_size", "is_torchrun_rank", "job_place"]

DIST_ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""The variables torchrun sets; their presence means we run under a distributed launcher."""

_CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def posix_processes() -> bool:
    """True where the commands that run a script (doctor, tune, run, compare, demo) can
    supervise it: POSIX process groups and signals (Linux, macOS), not Windows. The
    Booster needs neither."""
    return os.name == "posix" and hasattr(os, "killpg") and hasattr(signal, "SIGHUP")


def _int_var(values: Mapping[str, str], name: str, default: int) -> int:
    # torchrun sets these to decimal integers; unset or empty means "not distributed".
    raw = values.get(name, "").strip()
    return int(raw) if raw else default


def torchrun_env() -> dict[str, str]:
    """torchrun's variables (:data:`DIST_ENV_VARS`) set in this process now."""
    return {k: os.environ[k] for k in DIST_ENV_VARS if k in os.environ}


def rank() -> int:
    """This process's global rank (torchrun's RANK); 0 when not started by torchrun."""
    return _int_var(os.environ, "RANK", 0)


def world_size() -> int:
    """Processes in the job (torchrun's WORLD_SIZE); 1 when not started by torchrun."""
    return max(1, _int_var(os.environ, "WORLD_SIZE", 1))


def job_place() -> tuple[int, int] | None:
    """(rank, world size) of this process from torch.distributed, once the script has
    initialised it (ranks spawned with ``torch.multiprocessing`` have no RANK set); None before."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def is_torchrun_rank() -> bool:
    """This process was started by torchrun (or an equivalent agent) as one of its ranks."""
    return "LOCAL_RANK" in os.environ


@dataclass(frozen=True)
class Environment:
    """What this machine and installation can do. Plain data; ``to_dict`` gives JSON."""

    device: str
    """"cuda", "mps" or "cpu": where a model goes by default."""
    torch_version: str
    cpu_cores: int
    """Cores this process may run on (affinity-aware)."""
    ram_bytes: int
    """Total physical memory, bytes."""
    ram_available_bytes: int
    """Memory available when probed, bytes."""
    cpu_flags: tuple[str, ...] = ()
    """The bf16-relevant CPU instruction-set flags found (avx512_bf16, amx_bf16, amx_tile)."""
    cpu_capability: str = ""
    """torch's own view of the CPU's vector ISA (e.g. "AVX512")."""
    gpu_name: str = ""
    gpu_count: int = 0
    gpu_memory_bytes: int = 0
    compute_capability: tuple[int, int] | None = None
    cuda_bf16: bool = False
    compiler: str = ""
    """Path of the C++ compiler Inductor would use on CPU, "" when none."""
    triton: bool = False
    """Whether Triton imports (Inductor's GPU backend)."""
    mps_bf16: bool = False
    """Apple's MPS computes in bf16: macOS 14 or newer, and a bf16 op on 'mps' ran. False off MPS."""
    mps_inductor: bool = False
    """torch's Inductor has its Metal backend (a prototype from torch 2.6) and a Metal shader
    compiled here: what torch.compile needs on MPS. False off MPS."""
    dist_env: dict[str, str] = field(default_factory=dict)
    """torchrun's variables as seen (RANK, WORLD_SIZE, ...)."""

    @property
    def cpu_bf16(self) -> bool:
        """The CPU has bf16 instructions (avx512_bf16 or AMX)."""
        return any(flag in self.cpu_flags for flag in _CPU_BF16_FLAGS)

    @property
    def bf16(self) -> bool:
        """bf16 runs natively on ``device``."""
        return {"cuda": self.cuda_bf16, "mps": self.mps_bf16}.get(self.device, self.cpu_bf16)

    @property
    def tf32(self) -> bool:
        """The GPU has TF32 tensor cores (Ampere, compute capability 8.0, and newer)."""
        return self.device == "cuda" and (self.compute_capability or (0, 0)) >= (8, 0)

    @property
    def can_compile(self) -> bool:
        """torch.compile's default backend (Inductor) has what it needs on ``device``."""
        return {"cuda": self.triton, "mps": self.mps_inductor}.get(self.device, bool(self.compiler))

    @property
    def compile_reason(self) -> str:
        """Why compile can or cannot run here, in words."""
        if self.device == "cuda":
            return "Triton is installed" if self.triton else "Triton is not installed"
        if self.device == "mps":
            return ("Inductor's Metal backend compiles here (a prototype in torch)" if self.mps_inductor else
                    "this torch has no Inductor backend for MPS that compiles here (torch 2.6 and newer have one)")
        if self.compiler:
            return f"C++ compiler at {self.compiler}"
        return "no C++ compiler (set CXX or install g++) for Inductor's CPU backend"

    @property
    def distributed(self) -> bool:
        """Launched by torchrun (or an equivalent) with more than one process."""
        return self.world_size > 1

    @property
    def rank(self) -> int:
        """Global rank when probed (torchrun's RANK); 0 when not distributed."""
        return _int_var(self.dist_env, "RANK", 0)

    @property
    def local_rank(self) -> int:
        """Rank on this machine (torchrun's LOCAL_RANK): the GPU index it uses; 0 when not distributed."""
        return _int_var(self.dist_env, "LOCAL_RANK", 0)

    @property
    def world_size(self) -> int:
        """Processes in the job (torchrun's WORLD_SIZE); 1 when not distributed."""
        return max(1, _int_var(self.dist_env, "WORLD_SIZE", 1))

    @property
    def local_world_size(self) -> int:
        """Processes on this machine (torchrun's LOCAL_WORLD_SIZE); 1 when not distributed."""
        return max(1, _int_var(self.dist_env, "LOCAL_WORLD_SIZE", 1))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict, derived properties included."""
        data = dataclasses.asdict(self)
        for name in ("cpu_bf16", "bf16", "tf32", "can_compile", "compile_reason", "distributed"):
            data[name] = getattr(self, name)
        return data


def _cpu_flags() -> tuple[str, ...]:
    wanted = (*_CPU_BF16_FLAGS, "amx_tile")
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return tuple(f for f in wanted if f in present)
    except OSError:
        pass
    return ()


def _cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _compiler() -> str:
    for name in (os.environ.get("CXX", ""), "g++", "clang++", "c++"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    return ""


def _has_triton() -> bool:
    try:
        import triton  # noqa: F401  - optional: importing it is the check, so only here
    except Exception:
        return False
    return True


def _bf16_op_on_mps() -> bool:
    x = torch.ones(4, device="mps", dtype=torch.bfloat16)
    return (x + x).float().sum().item() == 8.0  # .item() syncs: the op has run, or raised


def _mps_bf16(op: Callable[[], bool] = _bf16_op_on_mps) -> bool:
    """Whether MPS computes in bf16: macOS 14 or newer (torch's own check where it has one),
    then ``op``, a tiny bf16 op on 'mps', runs. Called only where MPS is the device."""
    mps = torch.backends.mps
    try:
        if hasattr(mps, "is_macos_or_newer") and not mps.is_macos_or_newer(14, 0):
            return False
        return bool(op())
    except Exception:  # noqa: BLE001 - any refusal means no bf16 here
        return False


_PROBE_SHADER = "kernel void torchboost_probe(device float* out, uint i [[thread_position_in_grid]]) { out[i] = 1.0; }"


def _mps_inductor() -> bool:
    """Whether torch.compile can run on MPS: Inductor's Metal backend is in this torch and a
    Metal shader compiles (as its kernels are built). Called only where MPS is the device."""
    try:
        if importlib.util.find_spec("torch._inductor.codegen.mps") is None:
            return False
        torch.mps.compile_shader(_PROBE_SHADER)
    except Exception:  # noqa: BLE001 - no backend, or no shader compiler: compile stays off
        return False
    return True


def _device() -> str:
    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


@functools.lru_cache(maxsize=1)
def probe() -> Environment:
    """Probe once per process (cached); cheap: no benchmark runs here (on MPS, a four-element
    bf16 op and a one-line Metal shader, to learn what the device takes)."""
    device = _device()
    memory = psutil.virtual_memory()
    gpu: dict[str, Any] = {}
    if device == "mps":
        gpu = dict(mps_bf16=_mps_bf16(), mps_inductor=_mps_inductor())
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        gpu = dict(
            gpu_name=props.name,
            gpu_count=torch.cuda.device_count(),
            gpu_memory_bytes=int(props.total_memory),
            compute_capability=(props.major, props.minor),
            cuda_bf16=bool(torch.cuda.is_bf16_supported()),
        )
    return Environment(
        device=device,
        torch_version=torch.__version__,
        cpu_cores=_cpu_cores(),
        ram_bytes=int(memory.total),
        ram_available_bytes=int(memory.available),
        cpu_flags=_cpu_flags(),
        cpu_capability=str(torch.backends.cpu.get_cpu_capability()),
        compiler=_compiler(),
        triton=_has_triton() if device == "cuda" else False,
        dist_env=torchrun_env(),
        **gpu,
    )


@functools.lru_cache(maxsize=1)
def measure_cpu_bf16_speedup(size: int = 512, repeats: int = 7) -> float:
    """The fastest of an fp32 CPU matmul's runs over the fastest of the same matmul's in bf16,
    the two interleaved.

    Above 1 means bf16 is faster on this CPU. Flags alone mislead: a CPU may
    advertise bf16 instructions that its matmul kernels do not use. Interleaved, each side's
    fastest run: another process's burst slows some runs of either side, not the fastest of
    one (timed one side after the other, a burst over the bf16 runs read 0.18x on a CPU whose
    bf16 is faster, and tune skipped bf16 as hopeless). Takes about 0.1 s; run once per process.
    """
    g = torch.Generator().manual_seed(0)  # never the user's global random stream
    a = torch.randn(size, size, generator=g)
    b = torch.randn(size, size, generator=g)
    sides = ((a, b), (a.bfloat16(), b.bfloat16()))
    for x, y in sides:
        torch.mm(x, y)  # warm-up: first call picks and loads kernels
    best = [math.inf, math.inf]
    for _ in range(repeats):
        for i, (x, y) in enumerate(sides):
            start = time.perf_counter()
            torch.mm(x, y)
            best[i] = min(best[i], time.perf_counter() - start)
    return best[0] / best[1]


def _busy_s() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _own_cpu_s() -> float:
    own = psutil.Process()
    # This process and its children that have ended (a trial's script and its workers).
    cpu = own.cpu_times()
    return cpu.user + cpu.system + cpu.children_user + cpu.children_system


BUSY_PCT = 25.0
"""Other processes' CPU use, percent of the machine, above which a measurement is said to
have shared it: tune's trials and the doctor's run (see :class:`LoadMeter`)."""


def tree_cpu_s() -> float:
    """CPU seconds of this process and of every live process under it (a loader's workers):
    what a script's own process tree has used so far, measured from inside it."""
    own = psutil.Process()
    total = sum(own.cpu_times()[:2])
    for child in own.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:  # it ended meanwhile
            continue
    return total


LOAD_MIN_SPAN_S = 0.25
"""The shortest span whose load is a figure: the machine's counters tick in hundredths of a
second, so over a shorter one the others' share reads anywhere from 0 to 100%."""


class LoadMeter:
    """Other processes' CPU use over a span, as a percent of the whole machine.

    ``with LoadMeter() as load: run_trial(...)``, then ``load.pct``: the machine's busy CPU
    time minus this process's and its finished children's, over the span's wall time times
    the cores. What a neighbour on a shared machine takes from a measurement. Inside the
    measured process itself, ``LoadMeter(own=tree_cpu_s)`` with :meth:`start` and
    :meth:`stop` around the span.
    """

    def __init__(self, own: Callable[[], float] | None = None, clock: Callable[[], float] | None = None) -> None:
        self._own = own or _own_cpu_s
        self._clock = clock or time.monotonic  # the span's wall time (a recorder hands its own)
        self._start: tuple[float, float, float] | None = None
        self.pct = 0.0
        self.measured = False
        """A span of at least :data:`LOAD_MIN_SPAN_S` has ended: ``pct`` is its figure."""

    def start(self) -> None:
        """The span begins now."""
        self._start = (self._clock(), _busy_s(), self._own())
        self.pct = 0.0

    def stop(self) -> float:
        """The span ends now; returns (and keeps in ``pct``) the others' share, percent."""
        if self._start is None:
            return self.pct
        wall, busy, own = (self._clock(), _busy_s(), self._own())
        span = (wall - self._start[0]) * (psutil.cpu_count() or 1)
        others = (busy - self._start[1]) - (own - self._start[2])
        # The machine's counters tick in hundredths of a second and this process's at another
        # pace: over a short span their difference can pass the whole machine. A share of it
        # is at most all of it.
        self.pct = min(100.0, max(0.0, 100.0 * others / span)) if span > 0 else 0.0
        self.measured = wall - self._start[0] >= LOAD_MIN_SPAN_S
        return self.pct

    def __enter__(self) -> "LoadMeter":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
