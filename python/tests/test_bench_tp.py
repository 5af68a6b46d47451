"""bench/python/bench_tp.py, the tensor-parallel scaling benchmark, in its CPU smoke mode (gloo, 2
ranks, tiny shapes, no CUDA graphs): every part runs and writes its JSON records, and the report
reads them."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench", "python", "bench_tp.py")


def test_bench_tp_smoke(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(HERE), os.environ.get("PYTHONPATH")) if p))
    r = subprocess.run([sys.executable, BENCH, "--smoke", "--out", str(tmp_path)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "== tensor-parallel scaling, p = 2 vs 1" in r.stdout
    data = json.load(open(tmp_path / "bench_tp.json"))
    assert data["meta"]["world"] == 2 and not data["meta"]["skipped"]
    recs = data["records"]
    have = {(x["what"], x["phase"], x["impl"], x["p"], x["layout"]) for x in recs}
    for what in ("layer", "model"):
        for phase in ("prefill", "decode"):
            for key in (("twellrt", 1, None), ("dense", 1, None), ("twellrt", 2, "balanced"), ("dense", 2, None)):
                assert (what, phase) + key in have, (what, phase, key)
        assert (what, "prefill", "twellrt", 2, "contiguous") in have
    assert all(x["ms"] > 0 for x in recs)
    for x in recs:
        if x["phase"] == "decode":
            assert x["rows"] in (1, 4) and x["graph"] is False  # the CPU has no graphs
        if x["impl"] == "twellrt" and x["p"] == 2 and x["phase"] == "prefill":
            assert len(x["allreduce_ms"]) == 2 and x["allreduce_share"] > 0
            err = x.get("rel_err_vs_p1", x.get("logits_rel_err_vs_p1"))
            assert err is not None and err < 2**-6, x  # the same function as one rank
    bal = [x for x in recs if x["what"] == "layer" and x["layout"] == "balanced" and x["phase"] == "prefill"]
    assert bal and all(x["modelled_cost_imbalance"] < 1.05 for x in bal)
    assert any(x.get("active_per_token", 0) > 0 for x in recs if x["what"] == "model" and x["phase"] == "decode")
