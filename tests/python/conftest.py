"""pytest set-up of tests/python (docs/python.md, "Tests").

Run after `pip install .`:            python3 -m pytest tests/python -q
or against a build tree:   PYTHONPATH=python KDC_LIBRARY=build/api/libkdc.so \
                                      python3 -m pytest tests/python -q

Keras runs on JAX with 8 virtual CPU devices: XLA_FLAGS must be set before
jax is first imported, which is why it happens here, at collection.  The
`kdc` command line (for the CLI comparisons) is $KDC_CLI, else
build/tools/kdc; those tests skip without it.
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:  # an installed package, or PYTHONPATH=python + KDC_LIBRARY
    import kdc  # noqa: F401
except ImportError:
    lib = os.path.join(ROOT, "build", "api", "libkdc.so")
    if os.path.exists(lib) and "KDC_LIBRARY" not in os.environ:
        os.environ["KDC_LIBRARY"] = lib
    sys.path.insert(0, os.path.join(ROOT, "python"))
    for m in [m for m in sys.modules if m == "kdc" or m.startswith("kdc.")]:
        del sys.modules[m]

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def kdc_cli():
    cli = os.environ.get("KDC_CLI") or os.path.join(ROOT, "build", "tools", "kdc")
    if not os.path.exists(cli):
        pytest.skip(f"no kdc command line at {cli} (set KDC_CLI)")
    return cli


@pytest.fixture(scope="session", autouse=True)
def jit_cache(tmp_path_factory):
    """Plans' compiled code is cached per session (docs/runtime.md)."""
    os.environ.setdefault("KDC_CACHE_DIR", str(tmp_path_factory.mktemp("jit-cache")))
