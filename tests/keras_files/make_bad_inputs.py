#!/usr/bin/env python3
"""Writes the Keras-file cases of the bad-input corpus (tests/e2e/bad_inputs,
replayed by test_e2e_bad_inputs) and the fuzz seeds of tests/fuzz/corpus/
keras_zip and hdf5, from the real Keras files of tests/keras_files/data
(merge_reshape: two Dense layers, four variables).

    python3 tests/keras_files/make_bad_inputs.py
"""
import io
import os
import shutil
import struct
import zipfile

import h5py
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "keras_files", "data", "merge_reshape")
OUT = os.path.join(ROOT, "tests", "e2e", "bad_inputs")
FUZZ = os.path.join(ROOT, "tests", "fuzz", "corpus")
MODEL = "@SRC/examples/merge_reshape/model.json"


def members():
    with zipfile.ZipFile(os.path.join(DATA, "model.keras")) as z:
        return {n: z.read(n) for n in z.namelist()}


def write_zip(path, items, compress=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compress) as z:
        for name, data in items:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, compress_type=compress)


def h5_from(src, edit):
    """A copy of the weights file |src| changed by edit(h5py.File), as bytes."""
    bio = io.BytesIO(open(src, "rb").read())
    with h5py.File(bio, "r+") as f:
        edit(f)
    return bio.getvalue()


def gheap_edit(src, prefix, how):
    """The file |src| with the global heap object whose string starts with
    |prefix| edited: ("size", d) adds d to its recorded size, "index"
    renumbers it, "free0" sets its collection's free-space object to size 0."""
    b = bytearray(open(src, "rb").read())
    at = b.find(b"GCOL")
    while at >= 0:
        size = struct.unpack_from("<Q", b, at + 8)[0]
        p, hit, free = at + 16, None, None
        while p + 16 <= at + size:
            idx, osz = struct.unpack_from("<H", b, p)[0], struct.unpack_from("<Q", b, p + 8)[0]
            if idx == 0:
                free = p
                break
            if b[p + 16:p + 16 + len(prefix)] == prefix:
                hit = p
            p += 16 + ((osz + 7) & ~7)
        if hit is not None:
            if how == "index":
                struct.pack_into("<H", b, hit, 0xfff0)
            elif how == "free0":
                assert free is not None, "no free space in the collection"
                struct.pack_into("<Q", b, free + 8, 0)
            else:
                struct.pack_into("<Q", b, hit + 8, struct.unpack_from("<Q", b, hit + 8)[0] + how[1])
            return bytes(b)
        at = b.find(b"GCOL", at + 4)
    raise SystemExit(f"{src}: no heap object starting {prefix!r}")


def attr_edit(src, name, how):
    """The file |src| with the version 1 attribute message named |name|
    edited: "name" overwrites its name's terminator, "data" makes its
    dataspace's first dim 4096 larger than the data the message holds."""
    b = bytearray(open(src, "rb").read())
    key = name.encode() + b"\0"
    at = b.find(key)
    while at >= 0:
        d = at - 8  # the message's data: version 1, reserved, three u16 sizes, then the name
        if b[d] == 1 and struct.unpack_from("<H", b, d + 2)[0] == len(key):
            break
        at = b.find(key, at + 1)
    else:
        raise SystemExit(f"{src}: no attribute message {name!r}")
    name_len, dt_size = struct.unpack_from("<HH", b, d + 2)
    if how == "name":
        b[at + len(key) - 1] = ord("X")
    else:
        ds = d + 8 + ((name_len + 7) & ~7) + ((dt_size + 7) & ~7)
        assert b[ds] == 1 and b[ds + 1] >= 1, "a version 1 dataspace of rank >= 1"
        struct.pack_into("<Q", b, ds + 8, struct.unpack_from("<Q", b, ds + 8)[0] + 4096)
    return bytes(b)


def case(name, ext, data, expect, args, comment):
    fn = f"{name}.{ext}"
    if data is not None:
        with open(os.path.join(OUT, fn), "wb") as f:
            f.write(data)
    lines = [f"# {comment}"] + [f"#expect {e}" for e in expect] + args
    with open(os.path.join(OUT, f"{name}.args"), "w") as f:
        f.write("\n".join(lines) + "\n")


def compile_args(model, *extra):
    return ["compile", model, *extra, "-o", "@OUT"]


def main():
    m = members()
    cfg, meta, w = m["config.json"], m["metadata.json"], m["model.weights.h5"]
    wfile = os.path.join(DATA, "model.weights.h5")

    case("keras_not_zip", "keras", b"PK\x03\x04" + b"\0" * 60, ["keras_not_zip.keras", "zip"],
         compile_args("@DIR/keras_not_zip.keras"), "a zip signature and nothing of a zip")
    bio = io.BytesIO()
    write_zip(bio, [("metadata.json", meta), ("model.weights.h5", w)])
    case("keras_no_config", "keras", bio.getvalue(), ["keras_no_config.keras", "config.json"],
         compile_args("@DIR/keras_no_config.keras"), "a .keras without config.json")
    # declared size past the 64 MiB cap of config.json (65 MiB of spaces deflate to ~64 KB)
    bio = io.BytesIO()
    write_zip(bio, [("metadata.json", meta), ("config.json", b" " * (65 << 20)),
                    ("model.weights.h5", w)], zipfile.ZIP_DEFLATED)
    case("keras_bomb_declared", "keras", bio.getvalue(), ["keras_bomb_declared.keras: config.json",
         "declared size"], compile_args("@DIR/keras_bomb_declared.keras"),
         "zip bomb: config.json declares 65 MiB, past kdc's cap")
    # actual size past the declared one: headers say 100 bytes, the data inflates to 1 MiB
    bio = io.BytesIO()
    write_zip(bio, [("metadata.json", meta), ("config.json", cfg + b" " * (1 << 20)),
                    ("model.weights.h5", w)], zipfile.ZIP_DEFLATED)
    b = bytearray(bio.getvalue())
    real = len(cfg) + (1 << 20)
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = 0
        while True:
            i = b.find(sig, i)
            if i < 0:
                break
            if struct.unpack_from("<I", b, i + off)[0] == real:
                struct.pack_into("<I", b, i + off, len(cfg))
            i += 4
    case("keras_bomb_actual", "keras", bytes(b), ["keras_bomb_actual.keras: config.json"],
         compile_args("@DIR/keras_bomb_actual.keras"),
         "zip bomb: config.json declares its real size but inflates past it")
    for nm, member in (("dotdot", "../evil.txt"), ("absolute", "/tmp/evil.txt")):
        bio = io.BytesIO()
        write_zip(bio, [("metadata.json", meta), ("config.json", cfg), ("model.weights.h5", w),
                        (member, b"x")])
        case(f"keras_{nm}", "keras", bio.getvalue(), [f"keras_{nm}.keras: member", "evil.txt"],
             compile_args(f"@DIR/keras_{nm}.keras"), f"a member named {member}")
    bio = io.BytesIO()
    write_zip(bio, [("metadata.json", meta), ("config.json", cfg), ("model.weights.h5", w[:len(w) // 2])])
    case("keras_h5_truncated", "keras", bio.getvalue(),
         ["keras_h5_truncated.keras: model.weights.h5"], compile_args("@DIR/keras_h5_truncated.keras"),
         "model.weights.h5 cut in half")
    bio = io.BytesIO()
    write_zip(bio, [("metadata.json", b"[1, 2"), ("config.json", cfg), ("model.weights.h5", w)])
    case("keras_bad_metadata", "keras", bio.getvalue(), ["keras_bad_metadata.keras: metadata.json"],
         compile_args("@DIR/keras_bad_metadata.keras"), "metadata.json is not JSON")

    def drop(f):
        del f["layers/dense_1/vars/1"]

    def extra(f):
        f.create_dataset("layers/dense_2/vars/0", data=np.zeros((3,), "float32"))

    def shape(f):
        del f["layers/dense/vars/1"]
        f.create_dataset("layers/dense/vars/1", data=np.zeros((9,), "float32"))

    def dtype(f):
        del f["layers/dense/vars/1"]
        f.create_dataset("layers/dense/vars/1", data=np.array([b"abcdefgh"] * 8))

    def ints(f):
        del f["layers/dense/vars/1"]
        f.create_dataset("layers/dense/vars/1", data=np.zeros((8,), "int32"))

    for nm, fn, exp, why in (
            ("missing", drop, ["layers/dense_1/vars/1", "no dataset"], "a variable's dataset removed"),
            ("extra", extra, ["layers/dense_2/vars/0", "matches no variable"], "a dataset no layer has"),
            ("shape", shape, ["layers/dense/vars/1", "(9,)"], "a bias of the wrong shape"),
            ("dtype", dtype, ["layers/dense/vars/1", "element type"], "strings for a bias"),
            ("ints", ints, ["layers/dense/vars/1", "i32"], "integers for a float variable")):
        case(f"weights_h5_{nm}", "weights.h5", h5_from(wfile, fn), [f"weights_h5_{nm}.weights.h5"] + exp,
             compile_args(MODEL, "--weights", f"@DIR/weights_h5_{nm}.weights.h5"), why)
    # another model's weights: the layer layout does not match the config
    other = open(os.path.join(ROOT, "tests", "keras_files", "data", "text_classifier",
                              "model.weights.h5"), "rb").read()
    case("weights_h5_other_model", "weights.h5", other, ["weights_h5_other_model.weights.h5"],
         compile_args(MODEL, "--weights", "@DIR/weights_h5_other_model.weights.h5"),
         "the weights of another model (text_classifier)")
    # legacy: a layer named in layer_names without its group; a weights file given as a model
    leg = h5_from(os.path.join(DATA, "legacy.h5"), lambda f: None)
    names = list(h5py.File(io.BytesIO(leg), "r")["model_weights"].attrs["layer_names"])
    last = names[-1].decode() if isinstance(names[-1], bytes) else names[-1]

    def legacy_drop2(f):
        del f["model_weights/" + last]
    case("legacy_h5_missing_layer", "h5", h5_from(os.path.join(DATA, "legacy.h5"), legacy_drop2),
         ["legacy_h5_missing_layer.h5", "model_weights", last],
         compile_args("@DIR/legacy_h5_missing_layer.h5"), "layer_names lists a layer whose group is gone")
    # the global heap behind model_config (a variable-length string attribute): HDF5 1.10
    # follows these references unchecked; kdc checks them first (common/h5_heap.c)
    for nm, prefix, how, attr, exp, why in (
            ("longer", b"maximum", ("size", 1), "layer_names", "another length",
             "a layer name's heap object a byte longer than its string (an overflowing copy)"),
            ("past", b'{"class_name":', ("size", 4096), "model_config", "larger than its collection",
             "model_config's heap object runs 4096 bytes past its collection"),
            ("index", b'{"class_name":', "index", "model_config", "does not exist",
             "model_config's heap object renumbered: the reference names no object"),
            ("free0", b"maximum", "free0", "layer_names", "free space",
             "a free-space heap object of size 0 (HDF5 1.10's parser loops forever)")):
        case(f"legacy_h5_heap_{nm}", "h5", gheap_edit(os.path.join(DATA, "legacy.h5"), prefix, how),
             [f"legacy_h5_heap_{nm}.h5", attr, exp], compile_args(f"@DIR/legacy_h5_heap_{nm}.h5"), why)
    # the attribute messages HDF5 1.10 decodes while it looks for a name: kdc checks every one
    # of the object's header first (common/h5_ohdr.c)
    for nm, attr, how, exp, why in (
            ("name", "keras_version", "name", "not terminated",
             "keras_version's name unterminated (HDF5 1.10 strdup()s past the message)"),
            ("data", "layer_names", "data", "larger than its message",
             "layer_names' dataspace 4096 strings longer than its data (HDF5 1.10 copies past the "
             "message)")):
        case(f"legacy_h5_attr_{nm}", "h5", attr_edit(os.path.join(DATA, "legacy.h5"), attr, how),
             [f"legacy_h5_attr_{nm}.h5", "damaged attributes", exp],
             compile_args(f"@DIR/legacy_h5_attr_{nm}.h5"), why)
    # the root group's header continues at the undefined address: HDF5 1.10's metadata
    # accumulator wraps addr + size and copies from a null pointer; kdc's image driver
    # (common/h5_vfd.c) has no accumulator and refuses reads outside the image
    b = bytearray(open(os.path.join(DATA, "legacy.h5"), "rb").read())
    assert struct.unpack_from("<BxHII", b, 96)[0] == 1 and struct.unpack_from("<H", b, 112)[0] == 0x10
    struct.pack_into("<Q", b, 120, 2**64 - 1)
    case("legacy_h5_cont_undef", "h5", bytes(b), ["legacy_h5_cont_undef.h5", "not a readable HDF5"],
         compile_args("@DIR/legacy_h5_cont_undef.h5"),
         "the root group's header continued at the undefined address (a SIGSEGV in HDF5 1.10.8)")
    case("weights_h5_as_model", "weights.h5", None, ["weights_h5_extra.weights.h5", "--weights"],
         compile_args("@DIR/weights_h5_extra.weights.h5"), "a weights file given as the model")
    case("tfjs_graph_model", "json",
         b'{"format": "graph-model", "generatedBy": "2.11.0", "convertedBy": "TensorFlow.js Converter",'
         b' "modelTopology": {"node": [], "library": {}, "versions": {"producer": 1}},'
         b' "weightsManifest": []}\n',
         ["tfjs_graph_model.json: format", "graph model"], compile_args("@DIR/tfjs_graph_model.json"),
         "a TensorFlow.js graph model (not a layers model)")

    # fuzz seeds: real archives and weights files
    for sub, files in (("keras_zip", ["model.keras"]), ("hdf5", ["model.weights.h5", "legacy.h5"])):
        d = os.path.join(FUZZ, sub)
        os.makedirs(d, exist_ok=True)
        for fn in files:
            shutil.copy(os.path.join(DATA, fn), os.path.join(d, "merge_reshape_" + fn.replace(".", "_")))


if __name__ == "__main__":
    main()
