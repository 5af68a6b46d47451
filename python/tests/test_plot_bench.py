"""scripts/plot_bench.py on bench records written here: it runs headless, writes valid PNGs of
speedup against M and against density, skips what is not a bench record, and keeps one commit per
line. Needs matplotlib (python/requirements-dev.txt); skipped without it."""

import importlib.util
import json
import os
import struct
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "plot_bench.py")
GPU = "cuda:0 Test GPU (sm_90a, 132 SMs)"


def _plot_module():
    spec = importlib.util.spec_from_file_location("plot_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(op, M, nnz, dist, ours, base, path, commit="c0ffee1", date="2000-01-01T00:00:00Z",
            K=256, N=1024, correct=True):
    """One record as twell bench writes it (bench/record_json.c's fields)."""
    return {"op": op, "dtype": "bf16", "M": M, "K": K, "N": N, "T": 256, "C": 8,
            "distribution": dist, "nnz_target": nnz, "nnz_mean": nnz, "variant": "sm90+" + path,
            "requested_path": "auto", "path": path, "gated": True, "ours_ms": ours,
            "ours_min_ms": ours, "ours_max_ms": ours, "baseline": "cublas_ffn",
            "baseline_ms": base, "baseline_min_ms": base, "baseline_max_ms": base,
            "ratio": None if base is None else base / ours, "reps": 5, "max_rel_err": 1e-4,
            "checked_rows": 8, "correct": correct, "check": "synthetic", "gpu": GPU,
            "commit": commit, "date": date}


def _write_records(folder):
    """A serve-like sweep (eager and graph, two distributions, M 1..4096 at 10 per row) and a
    density sweep (eager, 10..200 per row); plus records the script must leave out."""
    recs = []
    for dist in ("uniform", "skewed"):
        for i, M in enumerate((1, 8, 64, 512, 4096)):
            path = "small" if M <= 8 else "tiled"
            recs.append(_record("ffn_infer", M, 10, dist, 0.1, 0.1 + 0.03 * i, path))
            recs.append(_record("ffn_infer_graph", M, 10, dist, 0.09, 0.1 + 0.03 * i, path))
            recs.append(_record("ffn_fused_only", M, 10, dist, 0.05, 0.1, path))
        for M in (8, 512):
            for j, nnz in enumerate((10, 20, 51, 102, 205)):
                recs.append(_record("ffn_infer", M, nnz, dist, 0.1 + 0.02 * j, 0.15,
                                    "dense" if j > 2 else "tiled"))
    # a failed check, a baseline that never ran and a record of another shape
    recs.append(_record("ffn_infer", 16384, 10, "uniform", 1.0, 9.0, "tiled", correct=False))
    recs.append(_record("ffn_infer", 32768, 10, "uniform", 1.0, None, "tiled"))
    recs.append(_record("ffn_infer", 64, 10, "uniform", 1.0, 2.0, "tiled", K=512, N=2048))
    with open(os.path.join(folder, "ffn_infer-sweep.json"), "w") as f:
        json.dump(recs, f, indent=2)
    # not bench records: skipped, not fatal
    with open(os.path.join(folder, "bench_model-other.json"), "w") as f:
        json.dump({"model": "1.5b", "tokens": 4}, f)
    with open(os.path.join(folder, "broken.json"), "w") as f:
        f.write("[{")
    return recs


def _png_size(path):
    """(width, height) of a PNG, after checking its signature and header chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    assert head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def _run(args, cwd):
    env = dict(os.environ)
    env.pop("DISPLAY", None)  # headless, as on a CI runner or the GPU machine
    env.pop("MPLBACKEND", None)
    return subprocess.run([sys.executable, SCRIPT] + args, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_plot_bench_writes_pngs(tmp_path):
    data = tmp_path / "results"
    data.mkdir()
    _write_records(data)
    out = tmp_path / "plots"
    files = sorted(str(p) for p in data.iterdir())
    res = _run(files + ["--out", str(out), "--target", "1:2", "--target", "8:2"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    want = {"speedup_vs_M_K256_N1024.png", "speedup_vs_density_K256_N1024.png"}
    got = {p.name for p in out.iterdir()}
    # the other shape has one point per line: nothing to draw for it
    assert got == want, (got, res.stdout, res.stderr)
    for name in want:
        p = out / name
        assert p.stat().st_size > 1000
        w, h = _png_size(str(p))
        assert w > 100 and h > 100
    assert "skipping" in res.stderr and "broken.json" in res.stderr


def test_plot_bench_default_files_and_shape_filter(tmp_path):
    data = tmp_path / "bench" / "results"
    data.mkdir(parents=True)
    _write_records(data)
    # default input bench/results/*.json and output bench/plots, relative to the working folder
    res = _run(["--shape", "256,1024"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "bench" / "plots" / "speedup_vs_M_K256_N1024.png").stat().st_size > 1000
    # a shape no record has: exit 1, nothing written
    res = _run(["--shape", "4096,11008", "--out", str(tmp_path / "none")], tmp_path)
    assert res.returncode == 1
    assert "no ffn_infer records" in res.stderr
    assert not (tmp_path / "none").exists()
    res = _run(["--shape", "4096"], tmp_path)
    assert res.returncode == 2


def test_plot_bench_selection():
    mod = _plot_module()
    a = mod.parse_args(["--modes", "eager,graph"])
    old = "2000-01-01T00:00:00Z"
    new = "2000-01-02T00:00:00Z"
    recs = [
        # an older commit's line at M 1 and 8; the newer commit measured M 8 and 64 only
        _record("ffn_infer", 1, 10, "uniform", 1.0, 3.0, "small", commit="old", date=old),
        _record("ffn_infer", 8, 10, "uniform", 1.0, 3.0, "small", commit="old", date=old),
        _record("ffn_infer", 8, 10, "uniform", 1.0, 2.0, "small", commit="new", date=new),
        _record("ffn_infer", 64, 10, "uniform", 1.0, 1.5, "tiled", commit="new", date=new),
        # graph mode; host mode and another op are not drawn by default
        _record("ffn_infer_graph", 8, 10, "uniform", 1.0, 4.0, "small"),
        _record("ffn_infer_host", 8, 10, "uniform", 1.0, 5.0, "small"),
        _record("ffn_fused_only", 8, 10, "uniform", 1.0, 6.0, "small"),
        _record("ffn_infer", 128, 10, "uniform", 1.0, 6.0, "tiled", correct=False, date=new),
    ]
    # an older record without path: the route comes from its variant
    legacy = _record("ffn_infer", 256, 10, "skewed", 2.0, 1.0, "x")
    del legacy["path"], legacy["requested_path"]
    legacy["variant"] = "sm90+dense1x4"
    pts = mod.select(recs + [legacy], a)
    key = ("Test GPU (sm_90a, 132 SMs)", 256, 1024, True, "uniform", "eager", 10.0)
    assert sorted(k[-1] for k in pts if k[:-1] == key) == [8, 64]
    assert pts[key + (8,)] == (2.0, "small")
    assert pts[key + (64,)] == (1.5, "tiled")
    gkey = key[:5] + ("graph", 10.0, 8)
    assert pts[gkey] == (4.0, "small")
    assert not any(k[5] == "host" for k in pts)
    assert pts[("Test GPU (sm_90a, 132 SMs)", 256, 1024, True, "skewed", "eager", 10.0, 256)] == (
        0.5, "dense")
    assert len(pts) == 4


def test_bench_tables(tmp_path):
    """scripts/bench_tables.py: one table per (shape, target, distribution), speedups of the
    newest passing record per (mode, M), the route row, failed checks left out."""
    recs = [
        _record("ffn_infer", 1, 10, "uniform", 0.1, 0.3, "small"),
        _record("ffn_infer_graph", 1, 10, "uniform", 0.1, 0.35, "small"),
        _record("ffn_infer", 512, 10, "uniform", 0.2, 0.1, "dense"),
        # newer: replaces the record above
        _record("ffn_infer", 512, 10, "uniform", 0.1, 0.15, "tiled", date="2001-01-01T00:00:00Z"),
        # a failed check: left out
        _record("ffn_infer_graph", 512, 10, "uniform", 0.01, 1.0, "tiled", correct=False),
        _record("ffn_infer", 8, 10, "skewed", 0.2, 0.1, "dense"),
        _record("ffn_fused_only", 8, 10, "skewed", 0.1, 0.1, "dense"),
    ]
    f = tmp_path / "r.json"
    f.write_text(json.dumps(recs))
    script = os.path.join(os.path.dirname(SCRIPT), "bench_tables.py")
    out = subprocess.run([sys.executable, script, str(f)], capture_output=True, text=True,
                         check=True).stdout
    skewed, uniform = out.split("**gated K 256 / N 1024, 10/row, uniform**")
    assert "**gated K 256 / N 1024, 10/row, skewed**" in skewed
    assert "| eager | 0.50 |" in skewed and "| route | dense |" in skewed
    assert "graph" not in skewed  # no graph record: no row
    assert "| M | 1 | 512 |" in uniform
    assert "| eager | 3.00 | 1.50 |" in uniform
    assert "| graph | 3.50 | – |" in uniform
    assert "| route | small | tiled |" in uniform
    empty = tmp_path / "e.json"
    empty.write_text("[]")
    assert subprocess.run([sys.executable, script, str(empty)], capture_output=True).returncode == 1
