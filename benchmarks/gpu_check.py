"""The check to run once on a machine with an NVIDIA GPU: does mini's CUDA emulator agree
with the real thing?

    python benchmarks/gpu_check.py                  # needs nvcc, a driver and a GPU
    python benchmarks/gpu_check.py --emulator-only  # a dry run of this script without a GPU
    python benchmarks/gpu_check.py --skip-sanitizer # without compute-sanitizer (faster)

It prints, for the closing note of the chapter's issue:

1. results: every reference kernel and every catalogued mistake built with nvcc and run
   on the GPU, against the same source on the emulator (and the references against
   numpy); deterministic kernels must agree;
2. verdicts: NVIDIA's compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on
   each reference and mistake, next to the emulator's reports;
3. speed: the reference tiled sgemm against cuBLAS (through PyTorch, when it has CUDA)
   and the elementwise add against the device's copy bandwidth, as ratios;
4. the cuda device of mini (managed memory, the backend's kernels) against numpy.

Nothing is asserted: it reports.  Budget about 10 minutes (compute-sanitizer runs one
Python process per kernel and tool).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.mistakes.cuda_kernels import (CUDA_MISTAKES, SCENARIOS, diagnose, launcher,  # noqa: E402
                                          load_module, mistake_source)
from mini.backends.cuda import build, emulator, kernels  # noqa: E402

#: compute-sanitizer tools, and the emulator report kinds each corresponds to
TOOLS = {"memcheck": {"out_of_bounds", "invalid_address"}, "racecheck": {"race"},
         "synccheck": {"barrier_divergence", "shuffle_mask"}, "initcheck": {"uninitialized_read"}}


def variants():
    out = [("ref_" + e, e, None) for e in SCENARIOS]
    out += [(m.id, m.exercise, mistake_source(m)) for m in CUDA_MISTAKES]
    return out


def build_modules(emulator_only: bool):
    """(gpu module or None, emulator module): the same sources, built both ways."""
    old = os.environ.get(build.EMULATE_ENV)
    try:
        os.environ[build.EMULATE_ENV] = "1"
        emu = load_module(variants())
        gpu = None
        if not emulator_only:
            os.environ[build.EMULATE_ENV] = "0"
            gpu = kernels.load_variants(variants(), name="gpu_check_variants")
    finally:
        if old is None:
            os.environ.pop(build.EMULATE_ENV, None)
        else:
            os.environ[build.EMULATE_ENV] = old
    return gpu, emu


def run_scenario(module, exercise, tag, seed=0):
    rng = np.random.default_rng(seed)
    with kernels.DeviceSession(module) as s:
        outcome = SCENARIOS[exercise](launcher(module, exercise, tag), module, s, rng)
        module.synchronize()
    return outcome


# --------------------------------------------------------------------------- 1. results

def compare_results(gpu, emu):
    print("\n1. results: GPU vs emulator (max |difference|; references also vs numpy)")
    print(f"   {'variant':<40} {'GPU vs emulator':>16} {'GPU vs numpy':>14}  note")
    for tag, exercise, _ in variants():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with emulator.check(schedules=1):
                e = run_scenario(emu, exercise, tag)
        if gpu is None:
            g = e
        else:
            g = run_scenario(gpu, exercise, tag)
        both_finite = np.isfinite(g.got) & np.isfinite(e.got)
        diff = float(np.abs(g.got - e.got)[both_finite].max(initial=0.0))
        nan_mismatch = int((np.isnan(g.got) != np.isnan(e.got)).sum())
        vs_numpy = float(np.abs(g.got - g.expected).max(initial=0.0))
        note = diagnose(exercise, g) if not tag.startswith("ref_") else ""
        if nan_mismatch:
            note = f"{nan_mismatch} NaN differ (uninitialised memory differs) " + note
        print(f"   {tag:<40} {diff:>16.3g} {vs_numpy:>14.3g}  {note}")


# --------------------------------------------------------------------------- 2. verdicts

def sanitizer_path():
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "compute-sanitizer").is_file():
            return str(Path(root) / "bin" / "compute-sanitizer")
    return shutil.which("compute-sanitizer")


def parse_sanitizer(output: str) -> int:
    """Errors compute-sanitizer found (from its ERROR SUMMARY line; -1 if absent)."""
    m = re.search(r"ERROR SUMMARY:\s*(\d+)\s+error", output)
    return int(m.group(1)) if m else -1


def sanitizer_verdicts(emu, tool_path):
    print("\n2. verdicts: compute-sanitizer errors per tool vs the emulator's report kinds")
    print(f"   {'variant':<40} " + " ".join(f"{t:>10}" for t in TOOLS) + "  emulator")
    agree = disagree = 0
    for tag, exercise, _ in variants():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with emulator.check(schedules=1) as r:
                run_scenario(emu, exercise, tag)
        kinds = sorted(r.kinds())
        cells = []
        for tool, mapped in TOOLS.items():
            if tool_path is None:
                cells.append("-")
                continue
            env = dict(os.environ, **{build.EMULATE_ENV: "0"})
            cmd = [tool_path, "--tool", tool, "--print-limit", "3", sys.executable, __file__,
                   "--run-one", tag, exercise]
            if tool == "racecheck":
                cmd[3:3] = ["--racecheck-report", "all"]
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
            errors = parse_sanitizer(p.stdout + p.stderr)
            cells.append(str(errors))
            emulated = bool(mapped & set(kinds))
            if errors >= 0:
                if (errors > 0) == emulated:
                    agree += 1
                else:
                    disagree += 1
        print(f"   {tag:<40} " + " ".join(f"{c:>10}" for c in cells) + "  " + (", ".join(kinds) or "clean"))
    if tool_path:
        print(f"   tool verdicts that agree with the emulator: {agree} of {agree + disagree} "
              "(racecheck sees shared memory only; initcheck global memory only)")


# --------------------------------------------------------------------------- 3. speed

def gpu_time(fn, sync, repeats=10):
    fn()
    sync()
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - t) / repeats


def speed(gpu):
    print("\n3. speed on the GPU")
    try:
        import torch
        has_torch = torch.cuda.is_available()
    except ImportError:
        has_torch = False
    sync = gpu.synchronize
    print(f"   {'sgemm n':<10} {'tiled GFLOP/s':>14} {'cuBLAS GFLOP/s':>15} {'tiled/cuBLAS':>13}")
    for n in (1024, 2048, 4096):
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n)).astype(np.float32)
        with kernels.DeviceSession(gpu) as s:
            A, B, C = s.to_device(a), s.to_device(a), s.empty((n, n))
            go = launcher(gpu, "matmul_tiled", "ref_matmul_tiled")
            t_ours = gpu_time(lambda: go(A, B, C, n, n, n), sync)
            ok = np.allclose(s.to_host(C)[:4, :4], (a[:4] @ a[:, :4]), rtol=1e-3, atol=1e-2)
        flops = 2 * n ** 3
        if has_torch:
            ta = torch.tensor(a, device="cuda")
            torch.backends.cuda.matmul.allow_tf32 = False
            t_blas = gpu_time(lambda: ta @ ta, torch.cuda.synchronize)
            print(f"   {n:<10} {flops / t_ours / 1e9:>14.0f} {flops / t_blas / 1e9:>15.0f} {t_blas / t_ours:>13.3f}"
                  + ("" if ok else "  (WRONG RESULT)"))
        else:
            print(f"   {n:<10} {flops / t_ours / 1e9:>14.0f} {'(no torch)':>15}")
    n = 1 << 26                                   # 256 MiB per array
    with kernels.DeviceSession(gpu) as s:
        x = s.empty(n)
        y = s.empty(n)
        z = s.empty(n)
        gpu.device_memset(x, 0, 4 * n)
        gpu.device_memset(y, 0, 4 * n)
        t_copy = gpu_time(lambda: gpu.device_copy(z, x, 4 * n), sync)
        go = launcher(gpu, "add", "ref_add")
        blocks = 132 * 8
        t_add = gpu_time(lambda: go(x, y, z, n, blocks, 256), sync)
    copy_bw = 2 * 4 * n / t_copy
    add_bw = 3 * 4 * n / t_add
    print(f"   device copy bandwidth (cudaMemcpy D2D): {copy_bw / 1e9:.0f} GB/s")
    print(f"   add kernel (grid-stride, {blocks}x256): {add_bw / 1e9:.0f} GB/s = {add_bw / copy_bw:.2f} of copy")


# --------------------------------------------------------------------------- 4. the device

def device_check():
    print("\n4. mini's cuda device vs numpy")
    import mini
    rng = np.random.default_rng(0)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 100)).astype(np.float32)
    ta, tb = mini.tensor(a, device="cuda"), mini.tensor(b, device="cuda")
    checks = {
        "matmul": ((ta @ tb).cpu().numpy(), a @ b),
        "relu(x)+1": ((ta.relu() + 1).cpu().numpy(), np.maximum(a, 0) + 1),
        "sum(dim=0)": (ta.sum(dim=0).cpu().numpy(), a.sum(axis=0)),
        "max over a view": (ta.T[::2].max().item(), a.T[::2].max()),
    }
    for name, (got, want) in checks.items():
        print(f"   {name:<20} max |diff| {float(np.abs(np.asarray(got) - want).max()):.3g}")
    print(f"   transfers: {json.dumps(mini.cuda.transfer_stats())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--emulator-only", action="store_true", help="dry run without a GPU")
    ap.add_argument("--skip-sanitizer", action="store_true")
    ap.add_argument("--run-one", nargs=2, metavar=("TAG", "EXERCISE"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.run_one:                                  # a child run under compute-sanitizer
        tag, exercise = args.run_one
        module = kernels.load_variants(variants(), name="gpu_check_variants")
        run_scenario(module, exercise, tag)
        return

    print("environment:")
    print(f"   nvcc: {build.nvcc_path()}, GPU usable: {build.gpu_available()} {build.gpu_reason()}")
    if not args.emulator_only and not build.gpu_available():
        print("no usable GPU here: run with --emulator-only for a dry run")
        sys.exit(2)
    if build.gpu_available():
        import mini
        print(f"   GPU: {mini.cuda.get_device_name()}")
    tool = None if (args.skip_sanitizer or args.emulator_only) else sanitizer_path()
    print(f"   compute-sanitizer: {tool}")
    t0 = time.perf_counter()
    gpu, emu = build_modules(args.emulator_only)
    print(f"   built in {time.perf_counter() - t0:.0f} s")
    compare_results(gpu, emu)
    sanitizer_verdicts(emu, tool)
    if gpu is not None:
        speed(gpu)
        device_check()
    print(f"\ndone in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
