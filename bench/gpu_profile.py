#!/usr/bin/env python3
"""Where one training step's GPU time goes, kernel by kernel (Nsight Compute).

usage: gpu_profile.py KDC PLAN OUT_DIR [--ncu PATH] [--top N]

PLAN is a `--target cuda` plan with a train_step.  Runs one epoch of one
batch (`kdc run PLAN --fit`, random inputs of the plan's shapes) under
`ncu --metrics gpu__time_duration.sum`, then joins every kernel entry
kdc_cuda_<k> with what `kdc inspect PLAN` says of kernel k (its output and
inputs) and the launch form (ELEMENT / COLUMN / ROW, the CUDA section), and
prints the N largest, the total and cuBLAS's share; writes
OUT_DIR/profile.json.  Exit status 0 with a printed SKIP line when ncu or a
GPU is missing (a benchmark, not a test)."""
import collections
import csv
import json
import os
import re
import shutil
import subprocess
import sys


def find_ncu(given):
    if given:
        return given
    p = shutil.which("ncu")
    if p:
        return p
    for root in ("/opt/nvidia/nsight-compute", "/usr/local/cuda/bin"):
        if os.path.isdir(root):
            for dirpath, _, files in os.walk(root):
                if "ncu" in files:
                    return os.path.join(dirpath, "ncu")
    return None


def plan_inputs(kdc, plan, out):
    """x.npy / y.npy for train_step from `kdc inspect`'s metadata line."""
    import numpy as np
    text = subprocess.run([kdc, "inspect", plan], capture_output=True, text=True,
                          check=True).stdout
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("{"))
    meta = None
    for end in range(start + 1, len(lines) + 1):  # the metadata object spans lines
        try:
            meta = json.loads("\n".join(lines[start:end]))
            break
        except json.JSONDecodeError:
            continue
    fn = next(f for f in meta["functions"] if f["name"] == "train_step")
    pred = next(f for f in meta["functions"] if f["name"] == "predict")
    rng = np.random.default_rng(0)
    x = pred["inputs"][0]
    y = pred["outputs"][0]
    xs = rng.standard_normal(x["shape"]).astype(np.float32) if x["dtype"] == "f32" else \
        rng.integers(0, 10, x["shape"]).astype(np.int32)
    ys = np.eye(y["shape"][-1], dtype=np.float32)[np.arange(y["shape"][0]) % y["shape"][-1]]
    np.save(os.path.join(out, "x.npy"), xs)
    np.save(os.path.join(out, "y.npy"), ys)
    del fn
    return text, x["shape"][0]


def forms(plan):
    """Launch form per kernel from the CUDA section (docs/gpu.md, versions 2
    and 3: the same per-kernel entries; 3 appends the cubin)."""
    import struct
    d = open(plan, "rb").read()
    sec = {}
    for i in range(64):
        o = 56 + 48 * i
        if o + 48 > len(d):
            break
        kind = struct.unpack_from("<I", d, o)[0]
        off, size = struct.unpack_from("<QQ", d, o + 32)
        if kind == 0 and off == 0:
            break
        sec[kind] = (off, size)
    if 9 not in sec:
        return {}
    off, size = sec[9]
    b = d[off:off + size]
    ver, _, n = struct.unpack_from("<III", b, 0)
    if ver not in (2, 3):
        return {}
    p, out = 12, {}
    for k in range(n):
        ln = struct.unpack_from("<I", b, p)[0]
        p += 4 + ln + 1
        threads, block, form, scratch = struct.unpack_from("<QIIQ", b, p)
        p += 24
        out[k] = ("ELEMENT", "COLUMN", "ROW")[form] + f" {threads // block}x{block}" + \
            (" split" if scratch else "")
    return out


def main():
    args = sys.argv[1:]
    top, ncu = 25, None
    if "--top" in args:
        i = args.index("--top"); top = int(args[i + 1]); del args[i:i + 2]
    if "--ncu" in args:
        i = args.index("--ncu"); ncu = args[i + 1]; del args[i:i + 2]
    kdc, plan, out = args
    os.makedirs(out, exist_ok=True)
    ncu = find_ncu(ncu)
    if not ncu:
        print("SKIP gpu_profile: ncu (Nsight Compute) not found")
        return 0
    text, batch = plan_inputs(kdc, plan, out)
    what = {}
    for line in text.splitlines():
        m = re.search(r"kernel kdc_kernel_(\d+) (.*)", line)
        if m and int(m.group(1)) not in what:
            what[int(m.group(1))] = m.group(2)[:110]
    fm = forms(plan)
    run = [kdc, "run", plan, "--fit", "--x", os.path.join(out, "x.npy"), "--y",
           os.path.join(out, "y.npy"), "--epochs", "1", "--batch-size", str(batch), "--quiet"]
    w = subprocess.run(run, capture_output=True, text=True)  # warm: the driver's PTX cache
    if w.returncode != 0:
        print("SKIP gpu_profile: the plan does not run here:", w.stderr.strip()[-300:])
        return 0
    r = subprocess.run([ncu, "--csv", "--metrics", "gpu__time_duration.sum",
                        "--target-processes", "all"] + run, capture_output=True, text=True,
                       timeout=300)
    open(os.path.join(out, "ncu.csv"), "w").write(r.stdout)
    rows = list(csv.reader(r.stdout.splitlines()))
    hdr = next((i for i, row in enumerate(rows) if "Kernel Name" in row), None)
    if hdr is None:
        print("SKIP gpu_profile: ncu gave no table:", r.stderr.strip()[-300:])
        return 0
    h = rows[hdr]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    def scale(unit):  # to microseconds: nsecond / ns, usecond / us, msecond / ms, second / s
        u = unit.strip().lower()
        return 1e-3 if u.startswith("n") else 1.0 if u.startswith(("u", "\u00b5")) else \
            1e3 if u.startswith("m") else 1e6
    agg = collections.defaultdict(lambda: [0, 0.0])
    units = set()
    for row in rows[hdr + 1:]:
        if len(row) <= vi:
            continue
        us = float(row[vi].replace(",", "")) * scale(row[ui])
        units.add(row[ui])
        agg[row[ki]][0] += 1
        agg[row[ki]][1] += us
    total = sum(a[1] for a in agg.values())
    blas = sum(a[1] for n, a in agg.items() if not n.startswith("kdc_cuda_"))
    ranked = sorted(agg.items(), key=lambda kv: -kv[1][1])
    print(f"gpu_profile: {sum(a[0] for a in agg.values())} launches, {total / 1e3:.3f} ms of "
          f"kernel time, cuBLAS and other libraries {blas / 1e3:.3f} ms "
          f"({100 * blas / max(total, 1e-9):.1f}%); ncu units {sorted(units)}")
    res = []
    for name, (n, us) in ranked[:top]:
        m = re.match(r"kdc_cuda_(\d+)", name)
        k = int(m.group(1)) if m else None
        desc = (fm.get(k, "") + " " + what.get(k, "")) if k is not None else "library"
        print(f"{us / 1e3:8.3f} ms {100 * us / total:5.1f}% x{n:<3d} {name[:40]:40s} {desc}")
        res.append({"kernel": name, "launches": n, "ms": us / 1e3, "what": desc})
    json.dump({"total_ms": total / 1e3, "library_ms": blas / 1e3, "top": res},
              open(os.path.join(out, "profile.json"), "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
