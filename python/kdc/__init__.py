"""kdc: the Keras distribution compiler, from Python (docs/python.md).

    import kdc
    plan = kdc.compile(model, distribution=keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name="data"), batch_size=64,
        loss="categorical_crossentropy", optimizer="adam")
    history = plan.fit(x, y, epochs=3)
    y_pred = plan.predict(x)
"""
from ._lib import lib as _cdll, path as library_path
from .distribution import DataParallel, DeviceMesh, LayoutMap, ModelParallel
from .errors import KdcError
from .plan import History, Plan, compile, load

__version__ = _cdll.kdc_version().decode()
api_version = _cdll.kdc_api_version()  # the library's KDC_API_VERSION

__all__ = ["compile", "load", "Plan", "History", "KdcError", "DeviceMesh", "LayoutMap",
           "DataParallel", "ModelParallel", "api_version", "library_path"]
