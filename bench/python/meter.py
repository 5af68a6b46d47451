"""What the model benchmark measures with: a clock (CUDA events on a GPU, perf_counter on the CPU),
an energy meter (NVML's total-energy counter, else NVML power samples, else nothing), peak memory,
and the JSON record writer (one file rewritten after every record, so a run cut short keeps what it
measured)."""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import threading
import time

import torch

SCHEMA = "twellrt.bench_hf/1"


# ------------------------------------------------------------------------------------------------
# time
# ------------------------------------------------------------------------------------------------


class Clock:
    """Times one call of a function: CUDA events around it on a GPU (the device time of the work it
    queues), perf_counter on the CPU (whose work is done when the call returns)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def mark(self):
        """A point in time to measure between: a recorded CUDA event, or perf_counter."""
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def between_ms(self, a, b) -> float:
        """ms from mark a to mark b (after a synchronise on the GPU)."""
        if self.cuda:
            b.synchronize()
            return a.elapsed_time(b)
        return (b - a) * 1e3

    def time_ms(self, fn) -> float:
        a = self.mark()
        fn()
        return self.between_ms(a, self.mark())

    def paired(self, fns: dict, reps: int, warmup: int) -> dict:
        """Median ms per call of each function, the variants timed alternately (a round of each,
        the order reversed every other round) so that clock and temperature drift fall on both;
        warm-up calls first. Returns {name: {"ms": median, "min": ..., "max": ..., "all": [...]}}."""
        for fn in fns.values():
            for _ in range(warmup):
                fn()
        self.sync()
        names = list(fns)
        ts = {n: [] for n in names}
        for r in range(max(reps, 1)):
            for n in names if r % 2 == 0 else names[::-1]:
                ts[n].append(self.time_ms(fns[n]))
        return {n: dict(ms=statistics.median(v), min=min(v), max=max(v), all=v) for n, v in ts.items()}


# ------------------------------------------------------------------------------------------------
# energy
# ------------------------------------------------------------------------------------------------


class Energy:
    """Board energy of the GPU over a window, in joules. method "counter": NVML's total-energy
    counter (nvmlDeviceGetTotalEnergyConsumption, mJ since the driver loaded; Volta and later);
    "power": NVML power readings (nvmlDeviceGetPowerUsage, mW) sampled by a thread every 5 ms and
    integrated; "n/a": no NVML (pynvml, from nvidia-ml-py) or no GPU. `want` is "auto" (counter,
    else power), "counter", "power" or "off"."""

    def __init__(self, device: torch.device, want: str = "auto"):
        self.method, self.note = "n/a", ""
        self._nvml = self._handle = None
        if device.type != "cuda" or want == "off":
            self.note = "no GPU" if device.type != "cuda" else "--energy off"
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = self._find(pynvml, device)
        except Exception as e:  # no pynvml, no NVML library, no such device
            self.note = f"NVML unavailable: {type(e).__name__}: {e}"
            return
        for m in (("counter", "power") if want == "auto" else (want,)):
            try:
                self._read(m)
                self.method = m
                return
            except Exception as e:
                self.note += f"{m}: {type(e).__name__}: {e}; "

    @staticmethod
    def _find(pynvml, device):
        # the torch device's own GPU (CUDA_VISIBLE_DEVICES may renumber), by UUID when torch gives it
        try:
            uuid = torch.cuda.get_device_properties(device).uuid
            return pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        except Exception:
            return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)

    def _read(self, method: str):
        if method == "counter":
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) * 1e-3  # J
        return self._nvml.nvmlDeviceGetPowerUsage(self._handle) * 1e-3  # W

    def start(self) -> None:
        self._t0 = time.perf_counter()
        if self.method == "counter":
            self._e0 = self._read("counter")
        elif self.method == "power":
            self._samples, self._stop = [], threading.Event()

            def sample():
                while not self._stop.is_set():
                    self._samples.append((time.perf_counter(), self._read("power")))
                    self._stop.wait(0.005)

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()

    def stop(self):
        """Joules since start(), or None (no method, or a counter that did not move)."""
        t1 = time.perf_counter()
        if self.method == "counter":
            e = self._read("counter") - self._e0
            return e if e > 0 else None
        if self.method == "power":
            self._stop.set()
            self._thread.join()
            s = self._samples
            if len(s) < 2:
                return None
            # trapezoids over the samples, the ends extended to the window's edges
            j = sum(0.5 * (p0 + p1) * (t1_ - t0_) for (t0_, p0), (t1_, p1) in zip(s, s[1:]))
            return j + s[0][1] * (s[0][0] - self._t0) + s[-1][1] * (t1 - s[-1][0])
        return None


# ------------------------------------------------------------------------------------------------
# memory
# ------------------------------------------------------------------------------------------------


def outside_torch_bytes():
    """Device memory in use that torch's caching allocator does not hold (CUDA context, and the
    library's plans and training states, which it allocates itself), or None on the CPU."""
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return total - free - torch.cuda.memory_reserved()


def tensor_bytes(module) -> int:
    """Bytes of a module's parameters and buffers, each storage counted once."""
    seen, n = set(), 0
    for t in list(module.parameters()) + list(module.buffers()):
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            n += t.untyped_storage().nbytes()
    return n


def window(clock: Clock, energy: Energy, fn, min_s: float, peak: bool):
    """Runs fn back to back until at least min_s seconds have passed (once at least), under the
    energy meter; returns (calls, joules or None, peak bytes torch allocated above what it held at
    the start or None)."""
    cuda = clock.cuda and peak
    clock.sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    energy.start()
    t0, calls = time.perf_counter(), 0
    while calls == 0 or time.perf_counter() - t0 < min_s:
        fn()
        calls += 1
        if calls % 4 == 0:
            clock.sync()  # the host must not run far ahead of the device, or the window is wrong
    clock.sync()
    joules = energy.stop()
    extra = torch.cuda.max_memory_allocated() - base if cuda else None
    return calls, joules, extra


# ------------------------------------------------------------------------------------------------
# records
# ------------------------------------------------------------------------------------------------


def commit() -> str:
    """TWELL_COMMIT, else the checkout's `git rev-parse --short HEAD` (+dirty), else "unknown"."""
    c = os.environ.get("TWELL_COMMIT")
    if c:
        return c
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        h = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if h.returncode != 0:
            return "unknown"
        d = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                           capture_output=True, text=True, timeout=10)
        return h.stdout.strip() + ("+dirty" if d.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment(device: torch.device) -> dict:
    """The fields every record carries about where it was measured."""
    import transformers

    try:
        import twellrt

        tw = twellrt.version()
    except Exception as e:  # the record still says which library failed to load
        tw = f"unavailable ({type(e).__name__})"
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.processor() or platform.machine()})"
    return dict(
        gpu=gpu, device=str(device), commit=commit(), torch=torch.__version__,
        transformers=transformers.__version__, twellrt_version=tw, python=platform.python_version(),
    )


class Records:
    """Collects records and rewrites DIR/bench_hf.json (a JSON array) after each one."""

    def __init__(self, outdir: str, env: dict):
        os.makedirs(outdir, exist_ok=True)
        self.path = os.path.join(outdir, "bench_hf.json")
        self.env = env
        self.rows = []

    def add(self, **fields) -> dict:
        r = dict(schema=SCHEMA, **fields)
        if r.get("ratio") is None and isinstance(r.get("dense"), (int, float)) and isinstance(r.get("twellrt"), (int, float)) and r["dense"]:
            r["ratio"] = r["twellrt"] / r["dense"]
        r.setdefault("ratio", None)
        r.setdefault("status", "ok")
        for k, v in self.env.items():
            r.setdefault(k, v)
        r["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.rows.append(r)
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(_clean(self.rows), f, indent=1, allow_nan=False)
        os.replace(tmp, self.path)
        return r


def _clean(v):
    """Plain JSON: NaN and infinities become null (strict JSON has neither), tensors lists."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, torch.Tensor):
        return _clean(v.tolist())
    if isinstance(v, float):
        return v if v == v and abs(v) != float("inf") else None
    if v is None or isinstance(v, (bool, int, str)):
        return v
    return str(v)
