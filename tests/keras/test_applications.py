"""keras.applications architectures (weights=None) and a ViT-style
transformer built from Keras layers: kdc's predictions on one device and on
a 2x4 mesh (DataParallel over 8 devices, and a Megatron-style layout for
the ViT) against Keras' predict, from the same weights.

Small inputs (32x32x3, batch 8) keep the time down; the heads are logits
(classifier_activation=None, 10 classes) so the comparison is not hidden
behind a near-uniform softmax.  Keras' side comes from refs/apps (made by
make_app_refs.py: building these models in Keras costs more than the
suite's budget, apps.py); KDC_ORACLE_LIVE=1 builds them in Keras instead.
Tolerance: |d| <= 1e-4 max|ref| + 1e-3 |ref|: 50-170 layers of float32
convolutions and normalisations, summed in different orders (kdc's
kernels and OpenBLAS vs XLA's), agree to rounding that grows with depth
and with the scale of the logits, not to a fixed absolute bound.
"""
import gzip
import json
import os

import numpy as np
import pytest

import apps
import oracle

REFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "refs", "apps")
LIVE = os.environ.get("KDC_ORACLE_LIVE", "") not in ("", "0")

# Megatron-style tensor parallelism of the ViT on data x model.
VIT_LAYOUT = {"batch_dim_name": "data", "layout_map": {
    "mha./(query|key|value)/kernel": [None, "model", None],
    "mha./(query|key|value)/bias": ["model", None],
    "mha./attention_output/kernel": ["model", None, None],
    "mlp._1/kernel": [None, "model"], "mlp._1/bias": ["model"],
    "mlp._2/kernel": ["model", None]}}


def case(name):
    if LIVE:
        text, man, xs, ref = apps.make_case(name)
        return text, apps.draw_weights(man), xs, ref
    with gzip.open(os.path.join(REFS, name + ".json.gz"), "rt") as f:
        text = f.read()
    z = np.load(os.path.join(REFS, name + ".npz"))
    w = apps.draw_weights(json.loads(str(z["manifest"])))
    np.testing.assert_allclose(apps.sums(w), z["sums"], rtol=1e-6, atol=1e-6,
                               err_msg="weights drawn differently from make_app_refs.py's")
    return text, w, apps.inputs(name), z["expected"]


@pytest.mark.parametrize("name", apps.NAMES)
def test_application(work, name):
    text, w, xs, ref = case(name)
    mj = os.path.join(work, "model.json")
    with open(mj, "w") as f:
        f.write(text)
    wp = os.path.join(work, "weights.safetensors")
    oracle.write_safetensors(wp, w)
    scale = float(np.max(np.abs(ref)))
    for mesh in (None, (2, 4)):
        extra = []
        if mesh:
            extra = oracle.mesh_args(mesh, ["data", "model"], VIT_LAYOUT if name == "ViT" else None, work)
        tag = "m1" if mesh is None else "m2x4"
        plan = oracle.compile_plan(mj, wp, os.path.join(work, tag + ".plan"), apps.BATCH, extra)
        (got,) = oracle.predict(plan, xs, work, tag=tag, n_out=1)
        oracle.assert_close(got, ref, rtol=1e-3, atol=1e-4 * scale, what="%s %s predict" % (name, tag))
