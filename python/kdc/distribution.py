"""kdc's own distribution objects, mirroring keras.distribution, and the
reading of Keras' own (so Keras is never a hard dependency)."""
import json


class DeviceMesh:
    """A mesh of ``shape`` devices with ``axis_names`` (keras.distribution.DeviceMesh)."""

    def __init__(self, shape, axis_names, devices=None):
        self.shape = tuple(int(s) for s in shape)
        self.axis_names = tuple(str(a) for a in axis_names)
        if len(self.shape) != len(self.axis_names) or not self.shape:
            raise ValueError(f"DeviceMesh: shape {self.shape} and axis_names "
                             f"{self.axis_names} must have the same, nonzero length")
        self.devices = devices


class LayoutMap(dict):
    """Variable path / layer output regex -> axes tuple (keras.distribution.LayoutMap).

    Values are tuples of mesh axis names or None, e.g. ``(None, "model")``.
    """

    def __init__(self, device_mesh=None):
        super().__init__()
        self.device_mesh = device_mesh

    def __setitem__(self, key, value):
        super().__setitem__(str(key), _axes(value))


class DataParallel:
    """The batch split over every device (keras.distribution.DataParallel)."""

    def __init__(self, device_mesh=None, devices=None):
        if device_mesh is None:
            n = len(devices) if devices is not None else 1
            device_mesh = DeviceMesh((n,), ("batch",))
        self.device_mesh = device_mesh
        self.batch_dim_name = device_mesh.axis_names[0]


class ModelParallel:
    """Variables and layer outputs laid out by a LayoutMap, the batch over
    ``batch_dim_name`` (keras.distribution.ModelParallel)."""

    def __init__(self, *, layout_map, batch_dim_name=None):
        if layout_map is None or layout_map.device_mesh is None:
            raise ValueError("ModelParallel needs a layout_map with a device_mesh")
        self.layout_map = layout_map
        self.device_mesh = layout_map.device_mesh
        self.batch_dim_name = batch_dim_name or self.device_mesh.axis_names[0]


def _axes(value):
    axes = getattr(value, "axes", value)  # a Keras TensorLayout or a tuple
    if isinstance(axes, str) or not hasattr(axes, "__iter__"):
        raise ValueError(f"layout: expected a tuple of axis names or None, got {value!r}")
    return tuple(None if a is None else str(a) for a in axes)


def _mesh_of(mesh):
    shape = getattr(mesh, "shape", None)
    names = getattr(mesh, "axis_names", None)
    if shape is None or names is None:
        raise ValueError(f"mesh: expected a DeviceMesh (kdc's or Keras'), got {mesh!r}")
    return tuple(int(s) for s in shape), tuple(str(a) for a in names)


def resolve(distribution=None, mesh=None, layout_map=None):
    """(mesh "2x4", axes "data,model", layout JSON text or None) from
    kdc.compile's arguments: a distribution (kdc's or Keras' DataParallel /
    ModelParallel), or a mesh and an optional layout_map."""
    batch_dim = None
    if distribution is not None:
        if mesh is not None or layout_map is not None:
            raise ValueError("give either distribution= or mesh=/layout_map=, not both")
        mesh = getattr(distribution, "device_mesh", None)
        if mesh is None:
            raise ValueError(f"distribution: expected DataParallel or ModelParallel, got "
                             f"{distribution!r}")
        layout_map = getattr(distribution, "layout_map", None)
        if layout_map is None:
            layout_map = getattr(distribution, "_layout_map", None)
        batch_dim = getattr(distribution, "batch_dim_name", None)
    if mesh is None:
        if layout_map is not None:
            mesh = getattr(layout_map, "device_mesh", None)
        if mesh is None:
            if layout_map is not None:
                raise ValueError("layout_map needs a mesh (mesh= or layout_map.device_mesh)")
            return None, None, None
    shape, names = _mesh_of(mesh)
    mesh_s = "x".join(str(s) for s in shape)
    axes_s = ",".join(names)
    if layout_map is None:
        return mesh_s, axes_s, None
    rules = {str(k): [a for a in _axes(v)] for k, v in layout_map.items()}
    layout = {"batch_dim_name": batch_dim or names[0], "layout_map": rules}
    return mesh_s, axes_s, json.dumps(layout)
