#!/usr/bin/env python3
"""kdc against the peers a Keras user on a CPU picks instead (issue 18):
XLA through JAX (Keras 3 on JAX, and plain jax.jit of the same math) and
PyTorch 2 (eager, torch.compile), same models, same thread count (all
cores), in one run.  One JSON line per model:

  {"model", "batch", "devices", "kdc_forward_ms", "kdc_step_ms",
   "<peer>_forward_ms", "<peer>_step_ms", ...,
   "forward_kdc_over_best", "step_kdc_over_best"  (< 1: kdc is faster than
       the fastest peer; the targets ask <= 1/1.2),
   "kdc_compile_s", "kdc_first_step_s", "xla_first_step_s", "step_xla_over_kdc",
   "kdc_first_predict_s", "xla_first_predict_s", "predict_xla_over_kdc",
   and each of those with _cpu_s (CPU seconds) / "_cpu_xla_over_kdc"}

kdc's figures come from bench_plan (the plan loaded once, medians of
repeated steps); the peers' from bench/peers.py in a process of their own,
never at the same time as kdc.  Cold start, like for like (cold_row):
kdc_first_step_s is `kdc compile` + `kdc run --fit` of one batch (two new
processes, the whole commands) against the first call of the jitted
training step in a new Python process (tracing + XLA compile + one step;
the interpreter's start and imports are not counted); kdc_first_predict_s
is `kdc compile` + `kdc run` (predict) of one batch against the first
jitted predict in another new process.  The *_cpu_s figures are the same
spans in CPU seconds (user + system, every thread: getrusage of the kdc
processes, process_time in JAX's), which a loaded machine distorts less
than wall time.

usage: compare.py BUILD_DIR [--models a,b] [--no-cold] [--peers ...]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--models", default="")
ap.add_argument("--no-cold", action="store_true")
ap.add_argument("--peers", default="keras_jax,jax,torch,torch_compile")
ap.add_argument("--reps", type=int, default=11)
args = ap.parse_args()

kdc = os.path.join(args.build, "tools", "kdc")
bench_plan = os.path.join(args.build, "bench", "bench_plan")
work = tempfile.mkdtemp(prefix="kdc-compare-")
subprocess.run([sys.executable, os.path.join(here, "big_models.py"),
                os.path.join(root, "examples"), work], check=True)
subprocess.run([sys.executable, os.path.join(here, "big_mlp.py"),
                os.path.join(root, "examples", "mlp_sequential", "model.json"),
                os.path.join(work, "mlp_4096.json")], check=True)
ex = os.path.join(root, "examples")
# name, model JSON, batch, mesh, layout (Keras ModelParallel as JSON)
MODELS = [
    ("mnist_mlp", f"{ex}/mnist_mlp/model.json", 16, None, None),
    ("mnist_mlp", f"{ex}/mnist_mlp/model.json", 128, None, None),
    ("mlp_4096", f"{work}/mlp_4096.json", 256, None, None),
    ("transformer_512", f"{work}/transformer_512.json", 8, None, None),
    # mixed_bfloat16 (the JSON's layer policies): Keras/JAX in bf16, PyTorch under autocast
    ("transformer_512_bf16", f"{work}/transformer_512_bf16.json", 8, None, None),
    ("cnn_64", f"{work}/cnn_64.json", 32, None, None),
    ("lstm_128", f"{work}/lstm_128.json", 32, None, None),
    ("mnist_mlp", f"{ex}/mnist_mlp/model.json", 128, "2x4", f"{ex}/mnist_mlp/layout.json"),
]
want = set(args.models.split(",")) if args.models else None


def compile_cmd(model, batch, mesh, layout, out):
    cmd = [kdc, "compile", model, "--batch", str(batch), "--seed", "1",
           "--loss", "categorical_crossentropy", "--optimizer", "adam", "-o", out]
    if mesh:
        cmd += ["--mesh", mesh] + (["--layout", layout] if layout else [])
    return cmd


def compile_plan(model, batch, mesh, layout, out):
    subprocess.run(compile_cmd(model, batch, mesh, layout, out), check=True)


def json_of(cmd, env=None):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env=None):
    """(wall s, CPU s of the child) of one command run to completion."""
    t0, c0 = time.perf_counter(), cpu_children()
    subprocess.run(cmd, check=True, env=env)
    return time.perf_counter() - t0, cpu_children() - c0


def cold_row(row, name, model, batch, mesh, layout, plan, env):
    """Cold start, like for like: `kdc compile` + the first training step
    (`kdc run --fit` of one batch) against XLA's first jitted training step,
    and `kdc compile` + `kdc run` (predict) of one batch against XLA's first
    jitted predict in a process that compiled nothing before.  Each kdc
    command is a new process without a JIT cache (KDC_CACHE_DIR unset)."""
    x, y = os.path.join(work, "x.npy"), os.path.join(work, "y.npy")
    nocache = {k2: v for k2, v in os.environ.items() if k2 != "KDC_CACHE_DIR"}
    cold = plan + ".cold"
    t_c, c_c = timed(compile_cmd(model, batch, mesh, layout, cold), nocache)
    # one batch of inputs for `kdc run`, made by bench_plan's rules
    subprocess.run([sys.executable, "-c", (
        "import json,sys,numpy as np\n"
        "m=json.load(open(sys.argv[1]));l=m['config']['layers'][0]['config']\n"
        "s=[int(sys.argv[3])]+l['batch_shape'][1:];n=int(np.prod(s))\n"
        "i=np.arange(n,dtype=np.uint64)\n"
        "x=((i*7)%10).astype(l['dtype']) if 'int' in l['dtype'] else "
        "(((i*2654435761)%1000)/1000.0).astype(np.float32)\n"
        "np.save(sys.argv[2],x.reshape(s))"), model, x, str(batch)], check=True)
    t_p, c_p = timed([kdc, "run", cold, "--input", x, "--output", x + ".out.npy"], nocache)
    # one-hot labels of the output's width, as bench_plan's targets
    subprocess.run([sys.executable, "-c", (
        "import sys,numpy as np\n"
        "o=np.load(sys.argv[1]);c=o.shape[-1]\n"
        "np.save(sys.argv[2],np.eye(c,dtype=np.float32)[np.arange(o.shape[0])%c])"),
        x + ".out.npy", y], check=True)
    t_f, c_f = timed([kdc, "run", cold, "--fit", "--x", x, "--y", y, "--epochs", "1",
                      "--batch-size", str(batch), "--quiet"], nocache)
    row["kdc_compile_s"], row["kdc_compile_cpu_s"] = round(t_c, 3), round(c_c, 3)
    row["kdc_first_step_s"], row["kdc_first_step_cpu_s"] = round(t_c + t_f, 3), round(c_c + c_f, 3)
    row["kdc_first_predict_s"] = round(t_c + t_p, 3)
    row["kdc_first_predict_cpu_s"] = round(c_c + c_p, 3)
    dist = ["--distribution", f"{mesh}:{layout}"] if mesh else []
    base = [sys.executable, os.path.join(here, "peers.py"), model, "--batch", str(batch),
            "--name", name, "--peers", "jax", "--cold"] + dist
    try:
        c = json_of(base, env)
        p = json_of(base + ["--cold-predict"], env)
    except subprocess.CalledProcessError as e:
        row["cold_error"] = (e.stderr or "")[-300:]
        return
    for what, peer in (("step", c), ("predict", p)):
        row[f"xla_first_{what}_s"] = round(peer[f"jax_first_{what}_s"], 3)
        row[f"xla_first_{what}_cpu_s"] = round(peer[f"jax_first_{what}_cpu_s"], 3)
        row[f"{what}_xla_over_kdc"] = round(peer[f"jax_first_{what}_s"] /
                                           row[f"kdc_first_{what}_s"], 2)
        row[f"{what}_cpu_xla_over_kdc"] = round(peer[f"jax_first_{what}_cpu_s"] /
                                               row[f"kdc_first_{what}_cpu_s"], 2)


for name, model, batch, mesh, layout in MODELS:
    if want and name not in want:
        continue
    plan = os.path.join(work, f"{name}_{batch}_{mesh or 1}.plan")
    compile_plan(model, batch, mesh, layout, plan)
    row = {"model": name, "batch": batch, "mesh": mesh or "1"}
    k = json_of([bench_plan, plan, "--reps", str(args.reps)])
    row.update({"devices": k["devices"], "threads": k["threads"],
                "kdc_forward_ms": k["forward_ms"], "kdc_step_ms": k["step_ms"]})
    env = dict(os.environ)
    peers = args.peers
    if mesh:
        n = 1
        for d in mesh.split("x"):
            n *= int(d)
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={n}"
        peers = "keras_jax"  # Keras' ModelParallel is the peer on a mesh
    pcmd = [sys.executable, os.path.join(here, "peers.py"), model, "--batch", str(batch),
            "--name", name, "--peers", peers, "--reps", str(args.reps)]
    if mesh:
        pcmd += ["--distribution", f"{mesh}:{layout}"]
    try:
        row.update({k2: v for k2, v in json_of(pcmd, env).items() if k2 not in ("model", "batch")})
    except subprocess.CalledProcessError as e:
        row["peers_error"] = (e.stderr or "")[-300:]
    for what in ("forward", "step"):
        peer_ms = [v for k2, v in row.items()
                   if k2.endswith(f"_{what}_ms") and not k2.startswith("kdc_")]
        if peer_ms and row.get(f"kdc_{what}_ms"):
            row[f"{what}_kdc_over_best"] = round(row[f"kdc_{what}_ms"] / min(peer_ms), 3)
    if not args.no_cold:
        cold_row(row, name, model, batch, mesh, layout, plan, env)
    print(json.dumps(row), flush=True)
