"""The installable package: a wheel built from python/ carries libtwellrt, the Lua runtime and the
templates, and works with no TWELL_* variables and no system Lua on the library path."""

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import twellrt

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)

SCRIPT = r"""
import sys, torch, twellrt
dev = sys.argv[1]
lib = twellrt.library_path()
assert lib.startswith(sys.argv[2]), lib
x = torch.randn(40, 64); x[:, 0] = 1
w = torch.randn(256, 64) / 8; w[:, 0] = -2
x, w = x.bfloat16().to(dev), w.bfloat16().to(dev)
p = twellrt.gate_pack(x, w, 64, 8)
y = twellrt.ffn_infer(x, p, w, w, w, 64, 8)
torch.cuda.synchronize() if dev == "cuda" else None
maps = open("/proc/self/maps").read()
lua = sorted({l.split()[-1] for l in maps.splitlines() if "liblua" in l})
assert lua and all(m.startswith(sys.argv[2]) for m in lua), lua
print("ok", lib, lua, float(y.float().abs().sum()))
"""


@pytest.mark.parametrize("dev", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_wheel_is_self_contained(tmp_path, dev):
    lib = os.environ.get("TWELL_LIBRARY") or twellrt.library_path()
    # build from a copy of python/ so that parallel runs never share setuptools' build folders
    src = tmp_path / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    env = dict(os.environ, TWELL_PREBUILT_LIB=lib, TWELL_SOURCE_DIR=os.path.dirname(PKG))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(src), "-w", str(tmp_path)],
        check=True, env=env, cwd=tmp_path,
    )
    whl = [f for f in os.listdir(tmp_path) if f.endswith(".whl")]
    assert len(whl) == 1
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / whl[0]) as z:
        names = z.namelist()
        assert f"twellrt/lib/libtwellrt.so.{twellrt._lib.ABI_VERSION}" in names and "twellrt/lib/liblua5.4.so.0" in names
        assert any(n.startswith("twellrt/share/twellrt/templates/") and n.endswith(".lua") for n in names)
        z.extractall(site)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWELL_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(site)
    env["TWELL_CACHE_DIR"] = str(tmp_path / "cache")
    r = subprocess.run([sys.executable, "-c", SCRIPT, dev, str(site / "twellrt")], env=env, cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("ok")
