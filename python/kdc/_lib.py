"""ctypes bindings of libkdc.so (include/kdc/kdc.h); docs/python.md says why ctypes.

The library is found in this order: $KDC_LIBRARY (a path, e.g. a build
tree's build/api/libkdc.so), then the libkdc.so installed in this package
by `pip install .`.
"""
import ctypes as C
import os

API_MAJOR = 1  # KDC_API_VERSION // 1000 this package was written for
MAX_DIMS = 8
MAX_METRICS = 32

DESCRIBE_PLAN, DESCRIBE_COLLECTIVES, DESCRIBE_SHARDING, DESCRIBE_EXPLAIN, DESCRIBE_PTX, \
    DESCRIBE_JSON = range(6)

c_char_pp = C.POINTER(C.c_char_p)


class Array(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("rank", C.c_int),
                ("dims", C.c_int64 * MAX_DIMS), ("name", C.c_char_p)]


class TensorInfo(C.Structure):
    _fields_ = [("name", C.c_char_p), ("dtype", C.c_int), ("rank", C.c_int),
                ("dims", C.c_int64 * MAX_DIMS), ("bytes", C.c_uint64)]


class CompileOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("model_path", C.c_char_p),
                ("model_text", C.c_char_p), ("model_text_len", C.c_size_t),
                ("weights_path", C.c_char_p), ("random_init", C.c_int), ("seed", C.c_uint64),
                ("batch", C.c_int64), ("batch_given", C.c_int), ("input_shapes", c_char_pp),
                ("n_input_shapes", C.c_size_t), ("mesh", C.c_char_p), ("axes", C.c_char_p),
                ("layout_path", C.c_char_p), ("layout_text", C.c_char_p),
                ("layout_text_len", C.c_size_t), ("layout_match", C.c_char_p),
                ("loss", C.c_char_p), ("optimizer", C.c_char_p), ("learning_rate", C.c_double),
                ("from_logits", C.c_int), ("no_shard_update", C.c_int), ("target", C.c_char_p),
                ("sm", C.c_int), ("dump_ir_dir", C.c_char_p), ("print_ir_after_all", C.c_int),
                ("matmul_precision", C.c_char_p),
                ("memory_per_device", C.c_char_p), ("objective", C.c_char_p),
                ("write_layout_path", C.c_char_p), ("machine_path", C.c_char_p)]


class RunOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("threads", C.c_int),
                ("collective_timeout_s", C.c_double), ("cache_dir", C.c_char_p),
                ("describe_only", C.c_int), ("cpu_only", C.c_int), ("coordinator", C.c_char_p),
                ("num_processes", C.c_int), ("process_id", C.c_int),
                ("local_device_ids", C.c_char_p), ("job_token_file", C.c_char_p)]


class FitProgress(C.Structure):
    _fields_ = [("epoch", C.c_int64), ("epochs", C.c_int64), ("step", C.c_int64),
                ("steps", C.c_int64), ("batch_loss", C.c_double), ("loss", C.c_double),
                ("val_loss", C.c_double), ("seconds", C.c_double), ("n_metrics", C.c_size_t),
                ("metrics", C.POINTER(C.c_double)), ("val_metrics", C.POINTER(C.c_double))]


PROGRESS_FN = C.CFUNCTYPE(None, C.c_void_p, C.POINTER(FitProgress))


class FitOptions(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("epochs", C.c_int64), ("batch_size", C.c_int64),
                ("shuffle", C.c_int), ("seed", C.c_uint64), ("validation_split", C.c_double),
                ("on_batch", PROGRESS_FN), ("on_epoch", PROGRESS_FN), ("user", C.c_void_p)]


_P = C.c_void_p  # opaque handles and kdc_status
_SIGS = {
    "kdc_api_version": (C.c_int, []),
    "kdc_version": (C.c_char_p, []),
    "kdc_free": (None, [C.c_void_p]),
    "kdc_status_code": (C.c_int, [_P]),
    "kdc_status_message": (C.c_char_p, [_P]),
    "kdc_status_free": (None, [_P]),
    "kdc_code_name": (C.c_char_p, [C.c_int]),
    "kdc_array_dtype_name": (C.c_char_p, [C.c_int]),
    "kdc_compile_options_init": (None, [C.POINTER(CompileOptions)]),
    "kdc_run_options_init": (None, [C.POINTER(RunOptions)]),
    "kdc_fit_options_init": (None, [C.POINTER(FitOptions)]),
    "kdc_compile": (_P, [C.POINTER(CompileOptions), C.POINTER(RunOptions), C.POINTER(_P)]),
    "kdc_compile_file": (_P, [C.POINTER(CompileOptions), C.c_char_p, C.POINTER(C.c_void_p)]),
    "kdc_plan_load": (_P, [C.c_char_p, C.POINTER(RunOptions), C.POINTER(_P)]),
    "kdc_plan_free": (None, [_P]),
    "kdc_plan_save": (_P, [_P, C.c_char_p]),
    "kdc_plan_warnings": (C.c_char_p, [_P]),
    "kdc_plan_batch": (C.c_int64, [_P]),
    "kdc_plan_device_count": (C.c_int64, [_P]),
    "kdc_plan_mesh_rank": (C.c_int, [_P]),
    "kdc_plan_mesh_axis": (C.c_char_p, [_P, C.c_int, C.POINTER(C.c_int64)]),
    "kdc_plan_has_training": (C.c_int, [_P]),
    "kdc_plan_input_count": (C.c_size_t, [_P]),
    "kdc_plan_output_count": (C.c_size_t, [_P]),
    "kdc_plan_input": (_P, [_P, C.c_size_t, C.POINTER(TensorInfo)]),
    "kdc_plan_output": (_P, [_P, C.c_size_t, C.POINTER(TensorInfo)]),
    "kdc_plan_predict": (_P, [_P, C.POINTER(Array), C.c_size_t, C.POINTER(Array), C.c_size_t]),
    "kdc_plan_describe": (_P, [_P, C.c_int, C.c_char_p, C.POINTER(C.c_void_p)]),
    "kdc_model_summary": (_P, [C.c_char_p, C.c_char_p, C.c_size_t, C.POINTER(C.c_void_p)]),
    "kdc_trainer_create": (_P, [_P, C.POINTER(_P)]),
    "kdc_trainer_free": (None, [_P]),
    "kdc_trainer_data_count": (C.c_size_t, [_P]),
    "kdc_trainer_input_count": (C.c_size_t, [_P]),
    "kdc_trainer_data": (_P, [_P, C.c_size_t, C.POINTER(TensorInfo)]),
    "kdc_trainer_metric_count": (C.c_size_t, [_P]),
    "kdc_trainer_metric_name": (C.c_char_p, [_P, C.c_size_t]),
    "kdc_trainer_fit": (_P, [_P, C.POINTER(Array), C.c_size_t, C.POINTER(FitOptions),
                             C.POINTER(_P)]),
    "kdc_trainer_step": (_P, [_P, C.POINTER(Array), C.c_size_t, C.POINTER(C.c_double)]),
    "kdc_trainer_evaluate": (_P, [_P, C.POINTER(Array), C.c_size_t, C.c_int64,
                                  C.POINTER(C.c_double), C.POINTER(C.c_double)]),
    "kdc_trainer_state_count": (C.c_size_t, [_P]),
    "kdc_trainer_state": (_P, [_P, C.c_size_t, C.POINTER(TensorInfo), C.POINTER(C.c_int)]),
    "kdc_trainer_get": (_P, [_P, C.c_char_p, C.POINTER(Array)]),
    "kdc_trainer_set": (_P, [_P, C.c_char_p, C.POINTER(Array)]),
    "kdc_trainer_save": (_P, [_P, C.c_char_p]),
    "kdc_trainer_save_keras": (_P, [_P, C.c_char_p, C.c_int]),
    "kdc_trainer_check_keras": (_P, [_P, C.c_char_p]),
    "kdc_trainer_load": (_P, [_P, C.c_char_p]),
    "kdc_trainer_load_weights": (_P, [_P, C.c_char_p]),
    "kdc_history_epochs": (C.c_int64, [_P]),
    "kdc_history_steps": (C.c_int64, [_P]),
    "kdc_history_key_count": (C.c_size_t, [_P]),
    "kdc_history_key": (C.c_char_p, [_P, C.c_size_t]),
    "kdc_history_values": (C.POINTER(C.c_double), [_P, C.c_size_t]),
    "kdc_history_batch_loss": (C.POINTER(C.c_float), [_P]),
    "kdc_history_free": (None, [_P]),
}


def _find():
    env = os.environ.get("KDC_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libkdc.so", "libkdc.so.1"):
        p = os.path.join(here, name)
        if os.path.exists(p):
            return p
    raise ImportError("kdc: libkdc.so not found: install the package (pip install .) or set "
                      "KDC_LIBRARY to a build tree's build/api/libkdc.so")


def _load():
    path = _find()
    try:
        lib = C.CDLL(path)
    except OSError as e:
        raise ImportError(f"kdc: cannot load {path}: {e}") from None
    for name, (res, args) in _SIGS.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    major = lib.kdc_api_version() // 1000
    if major != API_MAJOR:
        raise ImportError(f"kdc: {path} has C API version {lib.kdc_api_version()}, this package "
                          f"needs {API_MAJOR}.x")
    return lib, path


lib, path = _load()
