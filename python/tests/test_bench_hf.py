"""bench/python/bench_hf.py (the Hugging Face model benchmark) in its --smoke mode: every stage and
mode runs on a tiny LlamaForCausalLM, the records follow the schema, the self-checks pass, and
bench/python/plot_hf.py draws them; the energy meter's NVML paths against a stand-in NVML."""

import json
import os
import subprocess
import sys
import types

import pytest
import torch

pytest.importorskip("transformers")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BENCH = os.path.join(ROOT, "bench", "python", "bench_hf.py")
PLOT = os.path.join(ROOT, "bench", "python", "plot_hf.py")
sys.path.insert(0, os.path.join(ROOT, "bench", "python"))

import meter  # noqa: E402

FIELDS = {  # every record: field -> accepted types
    "schema": str, "model": str, "source": str, "shape": dict, "stage": str, "mode": str, "batch": int,
    "metric": str, "units": str, "better": str, "dense": (float, int, type(None)),
    "twellrt": (float, int, type(None)), "ratio": (float, type(None)), "status": str, "gpu": str, "device": str,
    "commit": str, "date": str, "torch": str, "transformers": str, "twellrt_version": str, "energy_method": str,
}
METRICS = {"throughput": ("tokens/ms", "tokens/s"), "energy_per_token": ("mJ/token",), "peak_memory": ("GiB",)}


def _run(out, device):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, BENCH, "--smoke", "--device", device, "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    return p, json.load(open(os.path.join(out, "bench_hf.json"))) if os.path.exists(os.path.join(out, "bench_hf.json")) else None


def _check_records(p, rows, device):
    assert p.returncode == 0, p.stderr[-4000:]
    assert rows, p.stderr[-2000:]
    for r in rows:
        for k, t in FIELDS.items():
            assert k in r and isinstance(r[k], t), (k, r.get(k), r)
        assert r["schema"] == meter.SCHEMA
        assert r["status"] in ("ok", "n/a"), r
        assert r["better"] in ("higher", "lower")
        if isinstance(r["dense"], (int, float)) and isinstance(r["twellrt"], (int, float)):
            assert r["ratio"] == pytest.approx(r["twellrt"] / r["dense"])
    shapes = {json.dumps(r["shape"], sort_keys=True) for r in rows}
    assert len(shapes) == 1 and rows[0]["shape"]["hidden"] == 128 and rows[0]["shape"]["layers"] == 2
    by = {(r["stage"], r["mode"], r["batch"], r["metric"]): r for r in rows}
    setup = by[("setup", "-", 4, "active_per_token")]
    assert len(setup["extra"]["activity"]) == 2 and setup["dense"] > 0
    check = by[("check", "fp32-reference", 2, "logits_rel_err")]
    assert check["status"] == "ok" and check["twellrt"] < 0.05, check
    want = [("prefill", m, b) for m in ("eager", "compiled") for b in (1, 2)]
    want += [("decode", m, b) for m in ("static", "eager") for b in (1, 2)] + [("train", "eager", 1)]
    for stage, mode, b in want:
        for metric, units in METRICS.items():
            r = by[(stage, mode, b, metric)]
            assert r["units"] in units, r
            if metric == "throughput":
                assert r["status"] == "ok" and r["dense"] > 0 and r["twellrt"] > 0, r
            elif device == "cpu":  # no NVML, no CUDA memory statistics: said, not invented
                assert r["status"] == "n/a" and r["dense"] is None and r["twellrt"] is None, r
            else:
                assert r["status"] in ("ok", "n/a") and (metric != "peak_memory" or r["dense"] > 0), r
    tr = by[("train", "eager", 1, "throughput")]
    assert tr["extra"]["loss_rel_diff"] < 0.02 and len(tr["extra"]["twellrt_l0"]) == 2
    for b in (1, 2):
        st = by[("decode", "static", b, "throughput")]["extra"]
        assert st["dense_compiled"] and st["twellrt_compiled"] and st["twellrt_graph_breaks"] == 0, st
        assert by[("prefill", "compiled", b, "throughput")]["extra"]["twellrt_graph_breaks"] == 0
    # a progress line per measurement, and the table on stdout
    for stage, mode, b in want:
        assert f"smoke {stage} {mode} batch {b}:" in p.stderr
    assert "| smoke | train | eager | 1 | throughput" in p.stdout


def _check_plot(out):
    p = subprocess.run([sys.executable, PLOT, str(out)], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, MPLBACKEND="Agg"))
    assert p.returncode == 0, p.stderr
    pngs = p.stdout.split()
    assert len(pngs) == 1 and os.path.basename(pngs[0]).startswith("bench_hf_smoke_")
    with open(pngs[0], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bench_hf_smoke_cpu(tmp_path):
    p, rows = _run(tmp_path, "cpu")
    _check_records(p, rows, "cpu")
    _check_plot(tmp_path)


@pytest.mark.gpu
def test_bench_hf_smoke_gpu(tmp_path):
    p, rows = _run(tmp_path, "cuda")
    _check_records(p, rows, "cuda")
    _check_plot(tmp_path)


def test_plot_hf_keeps_newest_ok_records(tmp_path):
    base = dict(schema=meter.SCHEMA, model="m", source="synthetic", shape=dict(hidden=8, intermediate=16, layers=1),
                mode="eager", batch=1, seq=4, metric="throughput", units="tokens/ms", better="higher", gpu="G", commit="c")
    rows = [dict(base, stage="prefill", dense=1.0, twellrt=2.0, ratio=2.0, status="ok", date="2026-01-01T00:00:00"),
            dict(base, stage="prefill", dense=1.0, twellrt=3.0, ratio=3.0, status="ok", date="2026-01-02T00:00:00"),
            dict(base, stage="train", dense=1.0, twellrt=None, ratio=None, status="error", date="2026-01-02T00:00:00"),
            dict(base, stage="train", metric="peak_memory", units="GiB", better="lower", dense=2.0, twellrt=1.0,
                 ratio=0.5, status="ok", date="2026-01-02T00:00:00")]
    sys.path.insert(0, os.path.dirname(PLOT))
    import plot_hf

    kept = plot_hf.newest(rows)
    assert sorted((r["stage"], r["ratio"]) for r in kept) == [("prefill", 3.0), ("train", 0.5)]
    f = tmp_path / "bench_hf.json"
    f.write_text(json.dumps(rows))
    out = plot_hf.plot(plot_hf.load([str(f)]), str(tmp_path))
    assert [os.path.basename(o) for o in out] == ["bench_hf_m_G.png"]


class _FakeNVML(types.ModuleType):
    """NVML as pynvml presents it: an energy counter in mJ that moves 50 J per second of wall time,
    and a power reading of 100 W; either can be made to fail."""

    def __init__(self, counter=True, power=True):
        super().__init__("pynvml")
        import time

        self._t0, self._time = time.perf_counter(), time.perf_counter
        self.counter, self.power = counter, power

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        raise RuntimeError("no such UUID")

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("gpu", i)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if not self.counter:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return int((self._time() - self._t0) * 50e3)

    def nvmlDeviceGetPowerUsage(self, h):
        if not self.power:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 100_000


@pytest.mark.parametrize("counter,power,method", [(True, True, "counter"), (False, True, "power"), (False, False, "n/a")])
def test_energy_meter_methods(monkeypatch, counter, power, method):
    import time

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML(counter, power))
    e = meter.Energy(torch.device("cuda", 0), "auto")
    assert e.method == method, e.note
    e.start()
    time.sleep(0.3)
    j = e.stop()
    if method == "n/a":
        assert j is None and "NOT_SUPPORTED" in e.note
    else:
        watts = 50 if method == "counter" else 100
        assert j == pytest.approx(0.3 * watts, rel=0.3), j
    assert meter.Energy(torch.device("cpu")).method == "n/a"
    assert meter.Energy(torch.device("cuda", 0), "off").method == "n/a"


def test_bench_hf_records_an_error_and_goes_on(tmp_path, monkeypatch):
    """A measurement that raises becomes an error record (with the message), the others still
    run, and the exit status says so."""
    import bench_hf

    real = bench_hf.Bench.prefill

    def flaky(self, m, mode, B):
        if B == 1:
            raise RuntimeError("injected failure")
        return real(self, m, mode, B)

    monkeypatch.setattr(bench_hf.Bench, "prefill", flaky)
    rc = bench_hf.main(["--smoke", "--device", "cpu", "--no-check", "--stages", "prefill:eager,train", "--out", str(tmp_path)])
    assert rc == 1
    rows = json.load(open(tmp_path / "bench_hf.json"))
    by = {(r["stage"], r["batch"], r["metric"]): r for r in rows}
    err = by[("prefill", 1, "throughput")]
    assert err["status"] == "error" and "injected failure" in err["note"] and err["units"] == "tokens/ms"
    assert by[("prefill", 2, "throughput")]["status"] == "ok"
    assert by[("train", 1, "throughput")]["status"] == "ok"


def test_bench_hf_checkpoint(tmp_path):
    """--checkpoint: a SparseLM checkpoint (written here, in the checkpoints' own MLP layout) is
    loaded dense and twellrt by twellrt.load_sparse_lm, checked and timed like a synthetic model."""
    import _hf
    import bench_hf
    from test_sparse_lm import write_checkpoint

    ck = write_checkpoint(str(tmp_path / "ck"), _hf.dense_model("llama"), "llama")
    out = tmp_path / "out"
    rc = bench_hf.main(["--smoke", "--models", "", "--checkpoint", ck, "--device", "cpu", "--seq", "32",
                        "--stages", "prefill:eager,decode:eager,train", "--prefill-batches", "2", "--decode-batches", "2",
                        "--out", str(out)])
    rows = json.load(open(out / "bench_hf.json"))
    assert rc == 0, [r for r in rows if r["status"] not in ("ok", "n/a")]
    assert {r["model"] for r in rows} == {"ck"}
    assert all(r["source"] == "checkpoint:" + os.path.abspath(ck) for r in rows)
    by = {(r["stage"], r["metric"]): r for r in rows}
    assert by[("setup", "active_per_token")]["dense"] > 0
    assert by[("check", "logits_rel_err")]["status"] == "ok"
    for stage in ("prefill", "decode", "train"):
        assert by[(stage, "throughput")]["status"] == "ok" and by[(stage, "throughput")]["twellrt"] > 0
