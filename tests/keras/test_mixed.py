"""Mixed precision as Keras defines it (docs/frontend.md, "Dtype policies"):
models built under keras.mixed_precision.set_global_policy("mixed_bfloat16")
(every layer's config carries the DTypePolicy, the last layer is
dtype="float32"), predicted and trained by kdc and by Keras 3 on JAX from
the same weights.

Models: an MLP (Dense, LayerNormalization, gelu, an f32 softmax head) and a
small transformer block (MultiHeadAttention, residual Adds,
LayerNormalization, a relu FFN, pooling, an f32 softmax head).

Tolerances (bf16 has an 8-bit significand: one ulp is 2^-8 = 3.9e-3
relative).  kdc rounds to bf16 where Keras does at layer boundaries, on the
GEMM operands and results and on the variables a layer reads, but keeps the
elementwise math inside a layer in f32 where Keras rounds after every op;
so results agree to about one bf16 ulp, not bitwise:
  PRED_TOL: softmax outputs (<= 1): |kdc - Keras| <= 4e-3 (one ulp at 1.0);
  LOSS_TOL: epoch-mean losses over 3 SGD epochs of 2 steps: 2e-3 relative.
The float32 model's predictions differ from Keras' bf16 ones by less than
PRED_TOL, so the numbers alone cannot catch a silent float32: the test
checks that bf16 is really in the plan (the GEMMs of the mixed layers are
bf16 dot_generals in the compiled IR; their GEMM steps are marked as bf16
inputs, computed in AMX-BF16 tiles on a CPU that has them (the same plan
run with KDC_CPU_BF16=off computes them in f32, also within tolerance),
else compile warns that they run in f32; a --target cuda plan runs them as bf16 cuBLAS GEMMs, PTX
accepted by ptxas for sm_80 and sm_90 when ptxas is installed).
"""
import os
import shutil
import subprocess

import keras
import numpy as np
import pytest

import oracle

PRED_TOL = dict(rtol=0, atol=4e-3)
# the CPU multiplies bf16 matrices in AMX tiles (runtime/gemm_bf16.c): read here
# from /proc/cpuinfo, independently of kdc's own check
AMX_BF16 = False
if os.path.exists("/proc/cpuinfo"):
    _flags = open("/proc/cpuinfo").read().split()
    AMX_BF16 = all(f in _flags for f in ("amx_bf16", "amx_tile", "avx512_bf16"))
LOSS_TOL = dict(rtol=2e-3, atol=0)
BATCH, ROWS, EPOCHS = 16, 32, 3


def mlp():
    inp = keras.layers.Input(shape=(20,))
    y = keras.layers.Dense(64, activation="relu", name="d1")(inp)
    y = keras.layers.LayerNormalization(name="ln")(y)
    y = keras.layers.Dense(32, activation="gelu", name="d2")(y)
    y = keras.layers.Dense(10, activation="softmax", name="out", dtype="float32")(y)
    return keras.Model(inp, y), (20,), 10


def block():
    S, D = 8, 32
    inp = keras.layers.Input(shape=(S, D))
    a = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8, name="mha")(inp, inp)
    x = keras.layers.LayerNormalization(name="ln1")(keras.layers.Add()([inp, a]))
    f = keras.layers.Dense(64, activation="relu", name="ff1")(x)
    f = keras.layers.Dense(D, name="ff2")(f)
    x = keras.layers.LayerNormalization(name="ln2")(keras.layers.Add()([x, f]))
    x = keras.layers.GlobalAveragePooling1D()(x)
    out = keras.layers.Dense(5, activation="softmax", name="out", dtype="float32")(x)
    return keras.Model(inp, out), (S, D), 5


def build(make, policy):
    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(3)
        return make()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def data(shape, classes):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS,) + shape).astype(np.float32)
    y = rng.integers(0, classes, size=(ROWS,)).astype(np.int32)
    return x, y


@pytest.mark.parametrize("make", [mlp, block], ids=["mlp", "transformer_block"])
def test_mixed_bfloat16(make, work):
    model, shape, classes = build(make, "mixed_bfloat16")
    assert model.get_layer("out").dtype_policy.name == "float32"
    assert model.layers[1].dtype_policy.name == "mixed_bfloat16"
    weights = oracle.model_weights(model)
    mj, wt = oracle.export(model, os.path.join(work, "m"), weights)
    x, y = data(shape, classes)

    # predictions, and bf16 in the compiled IR
    plan = os.path.join(work, "p.plan")
    ir = os.path.join(work, "ir")
    p = oracle.run_kdc("compile", mj, "--weights", wt, "--batch", BATCH, "-o", plan,
                       "--dump-ir", ir)
    warned = "bfloat16 GEMMs" in p.stderr and "computed in float32 on this CPU" in p.stderr
    assert warned != AMX_BF16, p.stderr
    first = open(os.path.join(ir, "01-verify.kir")).read()
    assert sum("dot_general" in l and ": bf16[" in l for l in first.splitlines()) >= 2
    steps = oracle.run_kdc("inspect", plan).stdout
    assert sum(" gemm " in l and "(bf16 inputs)" in l for l in steps.splitlines()) >= 2, steps
    got = oracle.predict(plan, [x[:BATCH]], work, n_out=1)[0]
    want = np.asarray(model.predict(x[:BATCH], verbose=0))
    oracle.assert_close(got, want, what="%s predictions" % make.__name__, **PRED_TOL)
    # the same plan with the bf16 GEMMs computed in float32 (KDC_CPU_BF16=off): also
    # within Keras' tolerance (the GEMM results are rounded to bf16 either way, so
    # the two runs mostly agree bitwise; tests/runtime/test_gemm_bf16 checks the tiles)
    os.environ["KDC_CPU_BF16"] = "off"
    try:
        got_f32 = oracle.predict(plan, [x[:BATCH]], work, tag="off", n_out=1)[0]
    finally:
        del os.environ["KDC_CPU_BF16"]
    oracle.assert_close(got_f32, want, what="%s predictions, f32 GEMMs" % make.__name__,
                        **PRED_TOL)
    # kdc's bf16 is measurably bf16: its predictions differ from a float32
    # run of the same weights (Keras') by more than float32 rounding would
    m32, _, _ = build(make, "float32")
    oracle.set_weights_by_path(m32, weights)
    want32 = np.asarray(m32.predict(x[:BATCH], verbose=0))
    assert np.abs(want32 - got).max() > 1e-4

    # a few training steps (SGD, sparse crossentropy on the f32 softmax)
    tplan = os.path.join(work, "t.plan")
    oracle.compile_plan(mj, wt, tplan, BATCH, ["--loss", "sparse_categorical_crossentropy",
                                               "--optimizer", "sgd", "--learning-rate", "0.05"])
    hist, _ = oracle.fit(tplan, [x], [y], work, EPOCHS, BATCH)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="sparse_categorical_crossentropy")
    kh = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    oracle.assert_close(hist["loss"], kh.history["loss"], what="%s losses" % make.__name__,
                        **LOSS_TOL)


def test_mixed_bfloat16_cuda_ptx(work):
    """The transformer block's training plan for --target cuda: its GEMMs are
    bf16 cuBLAS steps and ptxas accepts the PTX for sm_80 and sm_90."""
    model, _, _ = build(block, "mixed_bfloat16")
    mj, wt = oracle.export(model, os.path.join(work, "m"))
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    for sm in (80, 90):
        plan = os.path.join(work, "c%d.plan" % sm)
        oracle.run_kdc("compile", mj, "--weights", wt, "--batch", BATCH, "-o", plan,
                       "--target", "cuda", "--sm", sm, "--loss",
                       "sparse_categorical_crossentropy", "--optimizer", "adam")
        steps = oracle.run_kdc("inspect", plan).stdout
        n_bf16 = sum(" gemm " in l and "(bf16)" in l for l in steps.splitlines())
        assert n_bf16 >= 20, steps
        if not os.access(ptxas, os.X_OK):
            pytest.skip("ptxas not found")
        ptx = os.path.join(work, "c%d.ptx" % sm)
        with open(ptx, "w") as f:
            f.write(oracle.run_kdc("inspect", plan, "--ptx").stdout)
        subprocess.run([ptxas, "-arch=sm_%d" % sm, ptx, "-o", os.devnull], check=True)


def test_mixed_float16_loss_scaling(work):
    """mixed_float16 trains with dynamic loss scaling as Keras' compile does
    (a LossScaleOptimizer around SGD): targets of ~300 make the scaled
    gradients overflow f16 at the initial scale 2^15, so the first steps are
    skipped and the scale halves until they fit.  12 steps: Keras ends at
    scale 1024 after 5 skipped steps (iterations 7, step_counter 7); kdc's
    state holds the same (exponent -5: 2^(15-5)).  Losses (f32 MSE means of
    ~9e4) within 1e-6 relative, weights within 1e-6 + 1e-5 |w|: the f16
    layers round the same products either way."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        keras.utils.set_random_seed(1)
        inp = keras.layers.Input(shape=(20,))
        y = keras.layers.Dense(64, activation="relu", name="d1")(inp)
        y = keras.layers.Dense(32, activation="relu", name="d2")(y)
        y = keras.layers.Dense(4, name="out", dtype="float32")(y)
        model = keras.Model(inp, y)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    mj, wt = oracle.export(model, os.path.join(work, "m"))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 20)).astype(np.float32)
    y = (rng.normal(size=(64, 4)) * 300).astype(np.float32)
    plan = os.path.join(work, "t.plan")
    oracle.compile_plan(mj, wt, plan, BATCH, ["--loss", "mse", "--optimizer", "sgd",
                                              "--learning-rate", "1e-5"])
    hist, state = oracle.fit(plan, [x], [y], work, EPOCHS, BATCH)
    model.compile(optimizer=keras.optimizers.SGD(1e-5), loss="mse")
    assert type(model.optimizer).__name__ == "LossScaleOptimizer"
    kh = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    opt = model.optimizer
    assert float(opt.dynamic_scale.numpy()) == 1024.0  # the case does overflow
    assert int(state["loss_scale_optimizer/scale_exponent"]) == 10 - 15  # 2^(15 + e) = 1024
    assert int(state["loss_scale_optimizer/step_counter"]) == int(opt.step_counter.numpy())
    assert int(state["SGD/iteration"]) == int(opt.iterations.numpy()) == 7
    oracle.assert_close(hist["loss"], kh.history["loss"], rtol=1e-6, atol=0, what="f16 losses")
    oracle.assert_weights_close(state, oracle.model_weights(model), 1e-5, 1e-6, "f16 weights")


def test_bfloat16_policy_warns(work):
    """dtype "bfloat16" (not mixed): Keras keeps the variables in bf16; kdc
    keeps them f32 and rounds them where the layer reads them, which gives
    the same values from the same (bf16) weights, and says so in a located
    warning.  Predictions within PRED_TOL of Keras'."""
    model, shape, classes = build(mlp, "bfloat16")
    assert model.get_layer("d1").kernel.dtype == "bfloat16"
    mj, wt = oracle.export(model, os.path.join(work, "m"))
    x, _ = data(shape, classes)
    plan = os.path.join(work, "p.plan")
    p = oracle.run_kdc("compile", mj, "--weights", wt, "--batch", BATCH, "-o", plan)
    assert 'layers[1] (Dense "d1"): dtype policy "bfloat16": variables stay float32' in p.stderr
    got = oracle.predict(plan, [x[:BATCH]], work, n_out=1)[0]
    want = np.asarray(model.predict(x[:BATCH], verbose=0)).astype(np.float32)
    oracle.assert_close(got, want, what="bfloat16 predictions", **PRED_TOL)
