"""Writes tests/keras/refs/apps/NAME.json.gz (Keras 3 to_json) and NAME.npz
(Keras' predictions, the weight manifest and the drawn weights' sums) for
test_applications.py, with Keras on JAX (apps.py says why):

    python3 tests/keras/make_app_refs.py [NAME ...]
"""
import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: E402,F401  (XLA_FLAGS, KERAS_BACKEND before keras)
import keras  # noqa: E402
import numpy as np  # noqa: E402

import apps  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "refs", "apps")


def main(names):
    os.makedirs(OUT, exist_ok=True)
    for name in names:
        text, man, xs, ref = apps.make_case(name)
        with gzip.open(os.path.join(OUT, name + ".json.gz"), "wt") as f:
            f.write(text)
        np.savez_compressed(os.path.join(OUT, name + ".npz"), expected=ref,
                            manifest=np.array(apps.dumps_manifest(man)),
                            sums=apps.sums(apps.draw_weights(man)),
                            keras=np.array(keras.__version__))
        print(name, ref.shape, float(np.abs(ref).max()))


if __name__ == "__main__":
    main(sys.argv[1:] or apps.NAMES)
