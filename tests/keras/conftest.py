"""pytest set-up of the Keras oracle suite: Keras 3 on JAX with 8 virtual
CPU devices.  The environment must be set before jax or keras is imported
anywhere, so it is done here, at the top of the first file pytest loads."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_force_host_platform_device_count=8").strip()
os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

import oracle  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--oracle-seeds", type=int, default=None,
                     help="number of random models of test_random (default: "
                          "$KDC_ORACLE_SEEDS, else the suite's fixed seeds)")
    parser.addoption("--oracle-first-seed", type=int, default=None,
                     help="first seed of a long random run (default 1000)")


def pytest_configure(config):
    if not os.access(oracle.KDC, os.X_OK):
        raise pytest.UsageError("tests/keras: no kdc binary at %s (build it, or set KDC_BIN)"
                                % oracle.KDC)
    import keras
    import jax
    assert keras.backend.backend() == "jax", keras.backend.backend()
    assert len(jax.devices()) == 8, jax.devices()


@pytest.fixture
def work(tmp_path):
    return str(tmp_path)
