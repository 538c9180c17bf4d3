#!/usr/bin/env python3
"""Bad-input fuzzer for the kdc command line (docs/testing.md, "Bad input").

Takes valid inputs (model JSONs, layouts, .npy arrays, safetensors weights,
plans written by `kdc compile`), mutates them structurally and byte-wise,
runs every mutant through kdc (meant for the ASan+UBSan build) and
classifies the result against the error contract of docs/ARCHITECTURE.md:

  ok      exit 2, one line "kdc: error: ..." naming the input, output absent
          or (when it existed before) byte-identical
  accept  exit 0 (fine when the mutant is still valid; listed for review
          and a bug when the mutation always makes the input invalid)
  bug     anything else: sanitizer report, crash, exit 1 or 3, several
          lines, a line not naming the file, hang > 30 s, output created
          or clobbered on error

usage: badin.py --kdc BUILD/tools/kdc --work DIR [--seed N] [--n N]
                [--kinds json,layout,mesh,npy,safetensors,plan,cli]
                [--save CORPUS_DIR] [--jobs N]

Writes DIR/results.jsonl (one line per case) and prints a summary by kind
and class.  --save copies the inputs of every bug case into CORPUS_DIR as
<kind>-<n>.<ext> with a <kind>-<n>.args file (the kdc arguments, one per
line, with @IN for the mutant, @OUT for the output, @SRC/ for the source
tree) -- the format tests/e2e/test_e2e_bad_inputs.c replays.
"""
import argparse
import concurrent.futures
import itertools
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EX = os.path.join(SRC, "examples", "mnist_mlp")
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer",
                   "Segmentation fault", "Aborted", "core dumped")
TIMEOUT = 30

# ---------------------------------------------------------------------------
# xxHash64 (docs/plan-format.md: the plan checksum), to mutate past it.
M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (11400714785074694791, 14029467366897019727, 1609587929392839161,
                      9650029242287828579, 2870177450012600261)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    acc = (acc + lane * P2) & M64
    return (_rotl(acc, 31) * P1) & M64


def xxh64(data, seed=0):
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        lanes = struct.unpack_from("<%dQ" % ((n // 32) * 4), data, 0)
        for j in range(0, len(lanes), 4):
            v[0] = _round(v[0], lanes[j])
            v[1] = _round(v[1], lanes[j + 1])
            v[2] = _round(v[2], lanes[j + 2])
            v[3] = _round(v[3], lanes[j + 3])
        i = (n // 32) * 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for x in v:
            h = ((h ^ _round(0, x)) * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= _round(0, struct.unpack_from("<Q", data, i)[0])
        h = (_rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & M64
        h = (_rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (_rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


def plan_fix_checksum(b):
    b = bytearray(b)
    if len(b) >= 56:
        struct.pack_into("<Q", b, 48, xxh64(bytes(b[:48]) + bytes(b[56:])))
    return bytes(b)


# ---------------------------------------------------------------------------
# JSON mutations.  Values are mutated as Python objects, then serialized by
# dump(), which also writes duplicated keys (DupKeys) and non-finite numbers.
class DupKeys(list):
    """A JSON object written with repeated keys: a list of (key, value)."""


def dump(v):
    if isinstance(v, DupKeys):
        return "{" + ", ".join(json.dumps(k) + ": " + dump(x) for k, x in v) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(json.dumps(k) + ": " + dump(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(dump(x) for x in v) + "]"
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    if isinstance(v, RawJSON):
        return v.text
    return json.dumps(v)


class RawJSON:
    def __init__(self, text):
        self.text = text


def paths(v, prefix=()):
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, prefix + (i,))


def get(v, p):
    for k in p:
        v = v[k]
    return v


def put(v, p, x):
    get(v, p[:-1])[p[-1]] = x


NUMS = [0, -1, -7, 1, 2 ** 31, 2 ** 31 - 1, 2 ** 32 + 3, 2 ** 62, 2 ** 63 - 1, -(2 ** 63), 2 ** 64 + 1,
        10 ** 30, 1e300, -1e300, 0.5, -0.0, float("nan"), float("inf"), float("-inf"), 3.7]
WEIRD = [None, True, False, "", "x", [], {}, [None], [[1]], {"a": 1}, "float64", "int8", "bogus",
         "\u00e9\u4e2d", -1, 0, 2 ** 40]
DTYPES = ["float64", "float16", "int32", "int64", "bool", "string", "bogus", "", "bfloat16", "uint8"]


def json_mutants(text, rng):
    """(name, bytes) mutants of one JSON document."""
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    ps = list(paths(doc))
    out = []

    def mut(name, fn):
        d = json.loads(text)
        try:
            r = fn(d)
        except (KeyError, IndexError, TypeError, ValueError):
            return
        body = r if isinstance(r, (bytes, bytearray)) else dump(d).encode("utf-8", "surrogateescape")
        out.append((name, bytes(body)))

    for _ in range(6):
        p = rng.choice(ps[1:]) if len(ps) > 1 else ()
        if not p:
            continue
        mut("drop-key", lambda d, p=p: (get(d, p[:-1]).pop(p[-1])
                                        if isinstance(get(d, p[:-1]), dict) else get(d, p[:-1]).pop(p[-1]),
                                        None)[1])
        mut("retype", lambda d, p=p: put(d, p, rng.choice(WEIRD)))
        mut("wrap-list", lambda d, p=p: put(d, p, [get(d, p)]))
        mut("wrap-obj", lambda d, p=p: put(d, p, {"value": get(d, p)}))

    nums = [p for p in ps if p and isinstance(get(doc, p), (int, float)) and not isinstance(get(doc, p), bool)]
    for p in rng.sample(nums, min(8, len(nums))):
        mut("number", lambda d, p=p: put(d, p, rng.choice(NUMS)))
    lists_of_ints = [p for p in ps if p and isinstance(get(doc, p), list) and get(doc, p)
                     and all(isinstance(x, (int, type(None))) and not isinstance(x, bool) for x in get(doc, p))]
    for p in rng.sample(lists_of_ints, min(6, len(lists_of_ints))):
        mut("dims", lambda d, p=p: put(d, p, [rng.choice([0, -1, -5, 2 ** 31, 2 ** 62, None, 1])
                                                 for _ in get(d, p)]))
        mut("dims-rank", lambda d, p=p: put(d, p, get(d, p) + [rng.choice([1, 2, 0])]))
        mut("dims-short", lambda d, p=p: put(d, p, get(d, p)[:-1]))
    strs = [p for p in ps if p and isinstance(get(doc, p), str)]
    for p in rng.sample(strs, min(6, len(strs))):
        mut("string", lambda d, p=p: put(d, p, rng.choice(["", "x" * 5000, "a/b", "..", "%s%n", "\u0000z",
                                                           "Dense", "input_layer", "__keras_tensor__"])))
        mut("non-utf8", lambda d, p=p: put(d, p, "bad\udcff\udcfeutf8"))
    dts = [p for p in ps if p and p[-1] == "dtype" and isinstance(get(doc, p), str)]
    for p in rng.sample(dts, min(3, len(dts))):
        mut("dtype", lambda d, p=p: put(d, p, rng.choice(DTYPES)))
    # units / filters / kernel_size and friends: zero, negative, huge
    for key in ("units", "filters", "kernel_size", "strides", "pool_size", "rate", "axis", "target_shape",
                "input_dim", "output_dim", "dims", "n", "num_heads", "key_dim", "size", "padding", "cropping",
                "groups", "dilation_rate", "activation"):
        kp = [p for p in ps if p and p[-1] == key]
        for p in rng.sample(kp, min(2, len(kp))):
            mut("key-" + key, lambda d, p=p: put(d, p, rng.choice([0, -1, 2 ** 40, [0, 0], [-1], "same", None,
                                                                  1e300, float("nan"), [2 ** 31, 1]])))
    # layer-level surgery
    layers_p = [p for p in ps if p and p[-1] == "layers" and isinstance(get(doc, p), list) and get(doc, p)]
    for lp in layers_p[:2]:
        layers = get(doc, lp)
        names = [l.get("name") or (l.get("config") or {}).get("name") for l in layers if isinstance(l, dict)]
        for _ in range(3):
            i = rng.randrange(len(layers))
            mut("dup-layer", lambda d, i=i, lp=lp: get(d, lp).insert(i, json.loads(json.dumps(get(d, lp)[i]))))
            mut("drop-layer", lambda d, i=i, lp=lp: get(d, lp).pop(i) and None)
            mut("swap-layers", lambda d, i=i, lp=lp: (lambda L: L.insert(0, L.pop(i)))(get(d, lp)))
            if names and names[i]:
                j = rng.randrange(len(layers))
                mut("rename-dup", lambda d, i=i, j=j, lp=lp: _rename_layer(get(d, lp)[j], names[i]))
        # dangling and cyclic keras_history / inbound_nodes references
        hist = [p for p in paths(layers) if p and p[-1] == "keras_history"]
        hist += [p for p in paths(layers) if len(p) >= 3 and p[-3] == "inbound_nodes" and isinstance(
            get(layers, p), list) and get(layers, p) and isinstance(get(layers, p)[0], str)]
        for hp in rng.sample(hist, min(4, len(hist))):
            full = lp + hp
            mut("dangling-ref", lambda d, full=full: get(d, full).__setitem__(0, "no_such_layer"))
            mut("ref-index", lambda d, full=full: get(d, full).__setitem__(1, rng.choice([7, -1, 2 ** 40])))
            mut("ref-tensor", lambda d, full=full: get(d, full).__setitem__(2, rng.choice([3, -1])))
            owner = _owner_name(layers, hp)
            if owner:
                mut("self-cycle", lambda d, full=full, o=owner: get(d, full).__setitem__(0, o))
            last = names[-1] if names else None
            if last:
                mut("cycle", lambda d, full=full, o=last: get(d, full).__setitem__(0, o))
        for key in ("input_layers", "output_layers"):
            kp = lp[:-1] + (key,)
            try:
                get(doc, kp)
            except (KeyError, IndexError, TypeError):
                continue
            mut(key + "-dangling", lambda d, kp=kp: put(d, kp, [["no_such_layer", 0, 0]]))
            mut(key + "-empty", lambda d, kp=kp: put(d, kp, []))
            mut(key + "-flat", lambda d, kp=kp: put(d, kp, ["x", 0, 0]))
            mut(key + "-bad-index", lambda d, kp=kp: put(d, kp, [[names[0] if names else "x", 5, 9]]))
    # duplicated keys (json-c keeps one), NaN/Inf literals, deep nesting
    objs = [p for p in ps if isinstance(get(doc, p), dict) and get(doc, p)]
    for p in rng.sample(objs, min(3, len(objs))):
        def dupk(d, p=p):
            o = get(d, p)
            k = rng.choice(list(o))
            dk = DupKeys(list(o.items()) + [(k, rng.choice(WEIRD))])
            if p:
                put(d, p, dk)
            else:
                return dump(dk).encode()
        mut("dup-key", dupk)
    deep = "[" * 200000 + "]" * 200000
    mut("deep-nesting", lambda d: put(d, rng.choice(ps[1:]), RawJSON(deep)))
    mut("deep-top", lambda d: ("[" * 100000).encode())
    mut("nan-literal", lambda d: put(d, rng.choice(nums or ps[1:]), RawJSON(rng.choice(["NaN", "Infinity", "-Infinity",
                                                                                       "1e999", "-1e999"]))))
    # byte-wise
    b = text.encode() if isinstance(text, str) else text
    for _ in range(4):
        cut = rng.randrange(len(b))
        out.append(("truncate", b[:cut]))
        i = rng.randrange(len(b))
        out.append(("byte-flip", b[:i] + bytes([b[i] ^ (1 << rng.randrange(8))]) + b[i + 1:]))
        out.append(("byte-insert", b[:i] + bytes([rng.choice([0, 0xff, 0xc3, 0x80, ord("{"), ord('"')])]) + b[i:]))
        out.append(("byte-delete", b[:i] + b[i + rng.randrange(1, 16):]))
    out.append(("empty", b""))
    out.append(("nul", b"\0" * 16))
    out.append(("bom", b"\xef\xbb\xbf" + b))
    out.append(("latin1", b.replace(b'"name"', b'"n\xe4me"', 1)))
    out.append(("trailing", b + b" {}"))
    return out


def diff_context(a, b, width=50):
    """The mutant |b| around its first difference from |a| (for the log)."""
    n = min(len(a), len(b))
    lo, hi = 0, n  # longest common prefix, by halving (slice compares run in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    i = lo
    lo, hi = 0, n - i  # longest common suffix after it
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    j = lo
    return "@%d %r" % (i, b[max(0, i - width):min(len(b) - j, i + width) + 1][:4 * width])


def _rename_layer(layer, name):
    layer["name"] = name
    if isinstance(layer.get("config"), dict):
        layer["config"]["name"] = name


def _owner_name(layers, hp):
    l = layers[hp[0]]
    if isinstance(l, dict):
        return l.get("name") or (l.get("config") or {}).get("name")
    return None


# ---------------------------------------------------------------------------
# npy / safetensors / plan mutations
def npy_parse(b):
    hl = struct.unpack_from("<H", b, 8)[0]
    return b[10:10 + hl], b[10 + hl:]


def npy_make(header, body, magic=b"\x93NUMPY\x01\x00", pad=True):
    h = header.encode("latin1") if isinstance(header, str) else header
    if pad:
        total = len(magic) + 2 + len(h) + 1
        h = h + b" " * ((64 - total % 64) % 64) + b"\n"
    return magic + struct.pack("<H", len(h)) + h + body


def npy_mutants(b, rng, shape):
    hdr, body = npy_parse(b)
    h = hdr.decode("latin1").strip()
    out = []
    sh = "(" + ", ".join(str(x) for x in shape) + ("," if len(shape) == 1 else "") + ")"
    base = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }"

    def hd(s, must=True, body_=body):
        out.append(("header", npy_make(s, body_), must))

    for d in ["<f8", "|u1", ">f4", "<i4", "<f2", "bogus", "<c8", "|b1", "<i8", "O", "<U4", "|V4", ""]:
        hd(base.replace("<f4", d) % sh, d in ("bogus", "O", ""))  # kdc run converts numeric dtypes
    hd(base.replace("False", "True") % sh, False)
    for s in ["()", "(%d,)" % shape[0], "(-1, 28, 28, 1)", "(%d, 28, 28, 2)" % shape[0],
              "(%d, 28, 28, 1, 1)" % shape[0], "(0, 28, 28, 1)", "(4611686018427387904, 28, 28, 1)",
              "(9223372036854775807, 9223372036854775807)", "(18446744073709551617,)", "(1.5, 2)",
              "('a',)", "(%d, 28, 28)" % shape[0], "(1, 28, 28, 1)", "[%d, 28, 28, 1]" % shape[0]]:
        hd(base % s if "28" in s or s.startswith("(") else base % s, False)
    for s in ["", "{}", "{'descr': '<f4'}", "{'descr': '<f4', 'shape': %s}" % sh,
              "{'descr': '<f4', 'fortran_order': False, 'shape': %s, 'extra': 1}" % sh,
              "{'descr': '<f4', 'fortran_order': 'no', 'shape': %s}" % sh,
              "{'descr': '<f4', 'fortran_order': False, 'shape': %s" % sh, "not a dict", "\0\0\0",
              "{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': %s}" % sh,
              "{\"descr\": \"<f4\", \"fortran_order\": false, \"shape\": %s}" % sh.replace("(", "[").replace(")", "]"),
              "{'descr': '<f4', 'fortran_order': False, 'shape': (%s}" % ("1, " * 300)]:
        hd(s, False)
    out.append(("magic", b"\x93NUMPZ" + b[6:], True))
    out.append(("version3", b[:6] + b"\x03\x00" + b[8:], False))
    out.append(("version2", b[:6] + b"\x02\x00" + b[8:], True))  # v2's length is 4 bytes: misparsed
    out.append(("hlen-past-eof", b[:8] + struct.pack("<H", 65535) + b[10:200], True))
    out.append(("hlen-zero", b[:8] + struct.pack("<H", 0) + b[10:], True))
    out.append(("no-newline", npy_make(base % sh + "  ", body, pad=False), False))
    out.append(("body-extra", b + b"\0" * 4, False))
    out.append(("body-short", b[:-4], True))
    for _ in range(12):
        cut = rng.randrange(len(b))
        out.append(("truncate", b[:cut], True))
    for _ in range(6):
        i = rng.randrange(min(len(b), 10 + len(hdr)))
        out.append(("header-flip", b[:i] + bytes([b[i] ^ (1 << rng.randrange(8))]) + b[i + 1:], False))
    out.append(("empty", b"", True))
    return out


def st_parse(b):
    n = struct.unpack_from("<Q", b, 0)[0]
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_make(hdr, body, raw=None):
    h = raw if raw is not None else dump(hdr).encode()
    return struct.pack("<Q", len(h)) + h + body


def st_mutants(b, rng):
    hdr, body = st_parse(b)
    names = [k for k in hdr if k != "__metadata__"]
    out = []

    def m(name, fn, must=True):
        h = json.loads(json.dumps(hdr))
        r = fn(h)
        out.append((name, r if isinstance(r, bytes) else st_make(h, body), must))

    n = struct.unpack_from("<Q", b, 0)[0]
    out.append(("hlen-past-eof", struct.pack("<Q", len(b)) + b[8:], True))
    out.append(("hlen-huge", struct.pack("<Q", M64) + b[8:], True))
    out.append(("hlen-2^63", struct.pack("<Q", 1 << 63) + b[8:], True))
    out.append(("hlen-zero", struct.pack("<Q", 0) + b[8:], True))
    out.append(("hlen-short", struct.pack("<Q", n - 7) + b[8:], True))
    out.append(("non-json", st_make(None, body, raw=b"not json" + b" " * 8), True))
    out.append(("json-array", st_make(None, body, raw=b"[1, 2]"), True))
    out.append(("json-nul", st_make(None, body, raw=b"{\0}"), True))
    out.append(("tiny", b[:5], True))
    out.append(("empty", b"", True))
    for _ in range(10):
        out.append(("truncate", b[:rng.randrange(len(b))], True))
    for k in rng.sample(names, min(4, len(names))):
        m("missing", lambda h, k=k: h.pop(k) and None, False)  # may fall back on initialisers
        m("offsets-past-eof", lambda h, k=k: h[k].__setitem__("data_offsets", [len(body) - 4, len(body) + 4]))
        m("offsets-reversed", lambda h, k=k: h[k].__setitem__("data_offsets", h[k]["data_offsets"][::-1]))
        m("offsets-huge", lambda h, k=k: h[k].__setitem__("data_offsets", [M64 - 3, M64]))
        m("offsets-neg", lambda h, k=k: h[k].__setitem__("data_offsets", [-8, 0]))
        m("offsets-float", lambda h, k=k: h[k].__setitem__("data_offsets", [0.5, 4]))
        m("offsets-one", lambda h, k=k: h[k].__setitem__("data_offsets", [0]))
        m("offsets-str", lambda h, k=k: h[k].__setitem__("data_offsets", "0,4"))
        m("overlap", lambda h, k=k: h[k].__setitem__("data_offsets",
                                                        [0, h[k]["data_offsets"][1] - h[k]["data_offsets"][0]]), False)
        for dt in ["F16", "F64", "I32", "I64", "BF16", "BOGUS", "", 5, None, "U8", "BOOL"]:
            m("dtype", lambda h, k=k, dt=dt: h[k].__setitem__("dtype", dt),
              dt in ("BOGUS", "", 5, None))  # numeric weights are converted to f32
        for sh in [[], [0], [-1, 4], [2 ** 62, 2 ** 62], [2 ** 31, 2 ** 31, 4], [1], "x", [1.5], [None]]:
            m("shape", lambda h, k=k, sh=sh: h[k].__setitem__("shape", sh))
        m("no-dtype", lambda h, k=k: h[k].pop("dtype") and None)
        m("no-shape", lambda h, k=k: h[k].pop("shape") and None)
        m("no-offsets", lambda h, k=k: h[k].pop("data_offsets") and None)
        m("entry-not-obj", lambda h, k=k: h.__setitem__(k, [1, 2]))
        m("dup-key", lambda h, k=k: st_make(None, body, raw=dump(DupKeys(list(h.items()) + [(k, h[k])])).encode()),
          False)
    m("metadata-weird", lambda h: h.__setitem__("__metadata__", {"a": [1, {"b": None}]}), False)
    m("metadata-array", lambda h: h.__setitem__("__metadata__", [1]), False)
    m("extra-tensor", lambda h: h.__setitem__("zzz/unknown", {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}),
      False)
    return out


def plan_sections(b):
    ns = struct.unpack_from("<I", b, 32)[0]
    return [struct.unpack_from("<II24sQQ", b, 56 + 48 * i) for i in range(ns)]


def plan_mutants(b, rng):
    out = []
    L = len(b)
    ns = struct.unpack_from("<I", b, 32)[0]
    table_end = 56 + 48 * ns
    cuts = sorted(set(list(range(0, min(table_end + 8, L))) + [rng.randrange(L) for _ in range(40)] + [L - 1]))
    for c in cuts:
        out.append(("truncate", b[:c], True, False))
    for _ in range(30):
        i = rng.randrange(table_end)
        out.append(("bitflip-head", b[:i] + bytes([b[i] ^ (1 << rng.randrange(8))]) + b[i + 1:], True, False))
    # past the checksum: fixed checksum, mutated fields (a crafted file)
    def fixed(name, bb, must=True):
        out.append((name, plan_fix_checksum(bb), must, True))

    for _ in range(60):
        i = rng.randrange(16, table_end)
        if 48 <= i < 56:
            continue
        fixed("bitflip-head+sum", b[:i] + bytes([b[i] ^ (1 << rng.randrange(8))]) + b[i + 1:], False)
    for v in [0, 1, ns + 1, 2 ** 31, M64 & 0xffffffff]:
        bb = bytearray(b)
        struct.pack_into("<I", bb, 32, v)
        fixed("n_sections", bytes(bb), v != ns)
    for v in [0, 1, L - 1, L + 1, 2 ** 63, M64]:
        bb = bytearray(b)
        struct.pack_into("<Q", bb, 40, v)
        fixed("file_size", bytes(bb))
    secs = plan_sections(b)
    for i, (kind, res, name, off, size) in enumerate(secs):
        e = 56 + 48 * i
        for v in [0, 64, off + 64, off + 1, L, 2 ** 63, M64 - 63]:
            bb = bytearray(b)
            struct.pack_into("<Q", bb, e + 32, v)
            fixed("sec-offset", bytes(bb), v != off)
        for v in [0, size + 1, size - 1 if size else 1, L, 2 ** 63, M64]:
            bb = bytearray(b)
            struct.pack_into("<Q", bb, e + 40, v)
            fixed("sec-size", bytes(bb), False)
        bb = bytearray(b)
        bb[e + 8:e + 32] = b"x" * 24
        fixed("sec-name-unterminated", bytes(bb))
        bb = bytearray(b)
        struct.pack_into("<I", bb, e, rng.choice([0, 3, 8, 99, 2 ** 31]))
        fixed("sec-kind", bytes(bb), False)
        # the payload itself: program, buffers, metadata, weights (not code:
        # corrupt object code is past the trust line of docs/plan-format.md)
        nm = name.rstrip(b"\0").decode("latin1")
        if nm in ("code", "ptx") or size == 0:
            continue
        for _ in range(14 if nm in ("program", "buffers", "metadata") else 3):
            j = off + rng.randrange(size)
            r = rng.random()
            if r < 0.5:
                bb = b[:j] + bytes([b[j] ^ (1 << rng.randrange(8))]) + b[j + 1:]
            elif r < 0.8:
                k = j & ~3
                v = rng.choice([0, 0xffffffff, 0x7fffffff, 0x80000000, 1 << 20, 3])
                bb = b[:k] + struct.pack("<I", v) + b[k + 4:]
            else:
                k = j & ~7
                v = rng.choice([0, M64, 1 << 62, 1 << 32])
                bb = b[:k] + struct.pack("<Q", v) + b[k + 8:]
            fixed("payload-" + nm, bb, False)
    out.append(("empty", b"", True, False))
    out.append(("foreign", b"PK\x03\x04" + b"\0" * 100, True, False))
    return out


# ---------------------------------------------------------------------------
def mesh_cases():
    meshes = ["0", "1x0", "2x", "x2", "-2", "2x-4", " 2x4", "2x4 ", "2 x4", "", "1e3", "0x0", "2x4x", "x",
              "4294967296", "4294967297x1", "2x" * 40 + "2", "65536x65536", "9223372036854775807",
              "9223372036854775808", "2,4", "+2", "0x8", "8\n", "\u0663", "2X4", "2*4", "1x1x1x1x1x1x1x1x1x1",
              "3", "1x3", "5x2", "1000000", "ab"]
    cases = []
    for m in meshes:
        cases.append(("mesh", ["compile", "@SRC/examples/mnist_mlp/model.json", "--batch", "16", "--mesh", m,
                               "-o", "@OUT"], None))
    for ax in ["data", "data,data", "", ",", "a,b,c", "data,", ",model", "da ta,model", "x" * 300 + ",y",
               "data,model\n"]:
        cases.append(("mesh", ["compile", "@SRC/examples/mnist_mlp/model.json", "--batch", "16", "--mesh", "2x4",
                               "--axes", ax, "-o", "@OUT"], None))
    return cases


def cli_cases():
    M = "@SRC/examples/mnist_mlp/model.json"
    W = "@SRC/examples/mnist_mlp/weights.safetensors"
    X = "@SRC/examples/mnist_mlp/train_x.npy"
    Y = "@SRC/examples/mnist_mlp/train_y.npy"
    I = "@SRC/examples/mnist_mlp/input.npy"
    P, T = "@PLAN", "@TRAIN"
    c = [
        ["compile"], ["compile", M], ["compile", "-o"], ["compile", M, "-o"], ["compile", M, "-o", "@OUT", "-o", "@OUT"],
        ["compile", M, M, "-o", "@OUT"], ["compile", M, "--weights", "-o", "@OUT"],
        ["compile", M, "--batch", "-1", "-o", "@OUT"], ["compile", M, "--batch", "99999999999999999999", "-o", "@OUT"],
        ["compile", M, "--batch", "4294967296", "-o", "@OUT"], ["compile", M, "--batch", "", "-o", "@OUT"],
        ["compile", M, "--batch=", "-o", "@OUT"], ["compile", M, "--seed", "-1", "-o", "@OUT"],
        ["compile", M, "--loss", "bogus", "-o", "@OUT"], ["compile", M, "--optimizer", "bogus", "-o", "@OUT"],
        ["compile", M, "--learning-rate", "nan", "--loss", "mean_squared_error", "-o", "@OUT"],
        ["compile", M, "--learning-rate", "-1", "--loss", "mean_squared_error", "-o", "@OUT"],
        ["compile", M, "--learning-rate", "inf", "--loss", "mean_squared_error", "-o", "@OUT"],
        ["compile", M, "--optimizer", "adam", "-o", "@OUT"], ["compile", M, "--from-logits", "-o", "@OUT"],
        ["compile", M, "--target", "tpu", "-o", "@OUT"], ["compile", M, "--sm", "75", "-o", "@OUT"],
        ["compile", M, "--sm", "80", "-o", "@OUT"], ["compile", M, "--layout-match", "bogus", "-o", "@OUT"],
        ["compile", M, "--input-shape", "", "-o", "@OUT"], ["compile", M, "--input-shape", "x=1,2", "-o", "@OUT"],
        ["compile", M, "--input-shape", "-1,0", "-o", "@OUT"], ["compile", M, "--input-shape", "=", "-o", "@OUT"],
        ["compile", M, "--input-shape", "input_layer=28,28,1,5", "-o", "@OUT"],
        ["compile", M, "--layout", "/nonexistent.json", "-o", "@OUT"], ["compile", M, "--layout", M, "-o", "@OUT"],
        ["compile", M, "--weights", M + "x", "-o", "@OUT"], ["compile", M, "--weights", X, "-o", "@OUT"],
        ["compile", M, "-o", "/nonexistent/dir/x.plan"], ["compile", M, "-o", "@SRC"],
        ["compile", M, "--dump-ir", "/nonexistent/dir", "-o", "@OUT"], ["compile", X, "-o", "@OUT"],
        ["compile", "@SRC", "-o", "@OUT"], ["compile", M, "--random-init", "--weights", W, "-o", "@OUT"],
        ["compile", M, "--axes", "a,b", "-o", "@OUT"], ["compile", M, "--no-shard-update", "-o", "@OUT"],
        ["compile", M, "--mesh", "2x4", "--layout", "@SRC/examples/mnist_mlp/layout.json", "--batch", "3",
         "-o", "@OUT"],
        ["compile", "--", M, "-o", "@OUT"], ["compile", "-", "-o", "@OUT"], ["compile", M, "-o", "-"],
        ["run"], ["run", P], ["run", P, "--input"], ["run", P, "--input", I], ["run", P, "--output", "@OUT"],
        ["run", P, "--input", I, "--input", I, "--output", "@OUT"],
        ["run", P, "--input", I, "--output", "@OUT", "--output", "@OUT2"],
        ["run", P, "--input", I, "--threads", "0", "--output", "@OUT"],
        ["run", P, "--input", I, "--threads", "-1", "--output", "@OUT"],
        ["run", P, "--input", I, "--collective-timeout", "-1", "--output", "@OUT"],
        ["run", P, "--input", I, "--collective-timeout", "nan", "--output", "@OUT"],
        ["run", P, "--input", I, "--collective-timeout", "1e400", "--output", "@OUT"],
        ["run", P, "--input", I, "--num-processes", "0", "--output", "@OUT"],
        ["run", P, "--input", I, "--num-processes", "2", "--process-id", "5", "--output", "@OUT"],
        ["run", P, "--input", I, "--process-id", "-1", "--output", "@OUT"],
        ["run", P, "--input", I, "--coordinator", "nohost", "--num-processes", "2", "--process-id", "1",
         "--output", "@OUT"],
        ["run", P, "--input", I, "--coordinator", "127.0.0.1:99999", "--num-processes", "2", "--process-id", "0",
         "--output", "@OUT"],
        ["run", P, "--input", I, "--cache-dir", "/nonexistent/dir", "--output", "@OUT"],
        ["run", P, "--input", I, "--output", "/nonexistent/dir/y.npy"],
        ["run", P, "--input", I, "--output", "@SRC"],
        ["run", P, "--input", X, "--output", "@OUT"], ["run", P, "--input", "@SRC", "--output", "@OUT"],
        ["run", P, "--fit", "--x", X, "--y", Y], ["run", P, "--evaluate", "--x", X, "--y", Y],
        ["run", T, "--fit"], ["run", T, "--fit", "--x", X], ["run", T, "--fit", "--y", Y],
        ["run", T, "--fit", "--x", X, "--y", Y, "--batch-size", "0"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--batch-size", "-3"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "-1"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--validation-split", "1.5"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--validation-split", "-0.1"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--validation-split", "nan"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--validation-split", "0.9999", "--epochs", "1"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--validation-split", "1"],
        ["run", T, "--fit", "--evaluate", "--x", X, "--y", Y],
        ["run", T, "--evaluate", "--x", X, "--y", Y, "--validation-split", "0.5"],
        ["run", T, "--evaluate", "--x", X, "--y", Y, "--epochs", "2"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--input", I],
        ["run", T, "--fit", "--x", Y, "--y", X, "--epochs", "1"],
        ["run", T, "--fit", "--x", X, "--y", X, "--epochs", "1"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "1", "--save-weights", "/nonexistent/dir/w.st"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "1", "--history", "/nonexistent/dir/h.json"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "1", "--initial-weights", X],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "1", "--initial-weights", "/nonexistent.safetensors"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "1", "--batch-size", "1073741824"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "1", "--seed", "-5"],
        ["run", T, "--fit", "--x", X, "--y", Y, "--epochs", "1", "--bogus"],
        ["run", T, "--fit", "--x", X, "--x", X, "--y", Y, "--epochs", "1"],
        ["inspect"], ["inspect", P, "--explain"], ["inspect", P, "--explain", "nothing"],
        ["inspect", P, "--sharding", "nothing"], ["inspect", P, "--ptx"], ["inspect", P, "--bogus"],
        ["inspect", "/nonexistent.plan"], ["inspect", P, P], ["inspect", X], ["inspect", "@SRC"],
        ["inspect", M, "--sharding", "d1/kernel"], ["inspect", M, "--explain", "zzz"],
        ["frobnicate"], ["--bogus"], ["compile", "--help", "x"], ["run", "--version"],
    ]
    return [("cli", a, None) for a in c]


# ---------------------------------------------------------------------------
class Fuzz:
    def __init__(self, args):
        self.work = os.path.abspath(args.work)
        os.makedirs(self.work, exist_ok=True)
        # a copy: rebuilding the build's kdc mid-run must not fail the cases
        self.kdc = os.path.join(self.work, "kdc-under-test")
        shutil.copy2(args.kdc, self.kdc)
        self.rng = random.Random(args.seed)
        self.n = args.n
        self.save = args.save
        os.makedirs(self.work, exist_ok=True)
        self.seq = itertools.count(1)
        self.env = dict(os.environ)
        self.env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
        self.env["UBSAN_OPTIONS"] = "print_stacktrace=1"

    def sub(self, a):
        return [x.replace("@SRC", SRC).replace("@PLAN", self.plan).replace("@TRAIN", self.train) for x in a]

    def setup(self):
        s = os.path.join(self.work, "seed")
        os.makedirs(s, exist_ok=True)
        self.plan = os.path.join(s, "base.plan")
        self.train = os.path.join(s, "train.plan")
        self.weights = os.path.join(s, "saved.safetensors")
        M, W = os.path.join(EX, "model.json"), os.path.join(EX, "weights.safetensors")
        for a in (["compile", M, "--weights", W, "--batch", "37", "-o", self.plan],
                  ["compile", M, "--weights", W, "--batch", "32", "--loss", "categorical_crossentropy",
                   "-o", self.train],
                  ["run", self.train, "--fit", "--x", os.path.join(EX, "train_x.npy"), "--y",
                   os.path.join(EX, "train_y.npy"), "--epochs", "1", "--batch-size", "32", "--quiet",
                   "--save-weights", self.weights]):
            r = subprocess.run([self.kdc] + a, capture_output=True, env=self.env)
            if r.returncode:
                sys.exit("seed step failed: %s\n%s" % (a, r.stderr.decode(errors="replace")))

    def run_case(self, kind, op, args, data, ext, must, needle):
        """Runs one case; |data| is written to @IN (None: no mutant file)."""
        seq = next(self.seq)
        d = tempfile.mkdtemp(prefix="c%06d-" % seq, dir=self.work)
        inp = os.path.join(d, "in" + ext)
        if data is not None:
            with open(inp, "wb") as f:
                f.write(data)
        out = os.path.join(d, "out" + (".plan" if args and args[0] == "compile" else ".npy"))
        out2 = os.path.join(d, "out2.npy")
        pre = seq % 2 == 0  # every other case: the output exists before
        if pre:
            for p in (out, out2):
                with open(p, "wb") as f:
                    f.write(b"SENTINEL")
        a = [x.replace("@IN", inp).replace("@OUT2", out2).replace("@OUT", out) for x in self.sub(args)]
        try:
            r = subprocess.run([self.kdc] + a, capture_output=True, timeout=TIMEOUT, env=self.env, cwd=d)
            rc, err = r.returncode, r.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            rc, err = None, (e.stderr or b"").decode("utf-8", "replace")
        cls, why = self.classify(rc, err, must, needle, out, out2, pre)
        rec = {"kind": kind, "op": op, "class": cls, "why": why, "rc": rc, "args": args,
               "err": err[-2000:], "case": d}
        if cls == "bug" and self.save:
            self.save_case(kind, rec, data, ext)
        if cls != "bug":
            shutil.rmtree(d, ignore_errors=True)
        return rec

    def classify(self, rc, err, must, needle, out, out2, pre):
        if rc is None:
            return "bug", "hang > %d s" % TIMEOUT
        if any(m in err for m in SANITIZER_MARKS):
            return "bug", "sanitizer/crash"
        if rc < 0:
            return "bug", "signal %d" % -rc
        if rc == 0:
            return ("bug", "exit 0 on invalid input") if must else ("accept", "")
        if rc != 2:
            return "bug", "exit %d" % rc
        lines = err.rstrip("\n").split("\n")
        if len(lines) != 1:
            return "bug", "%d lines" % len(lines)
        if not lines[0].startswith("kdc: error: "):
            return "bug", "not a kdc error line"
        if needle and not any(n in lines[0] for n in needle.split("|")):
            return "bug", "does not name %s" % needle
        for p in (out, out2):
            if pre:
                with open(p, "rb") as f:
                    if f.read() != b"SENTINEL":
                        return "bug", "output clobbered"
            elif os.path.exists(p):
                return "bug", "output created"
        return "ok", ""

    def save_case(self, kind, rec, data, ext):
        os.makedirs(self.save, exist_ok=True)
        n = len([f for f in os.listdir(self.save) if f.startswith(kind + "-") and f.endswith(".args")])
        stem = os.path.join(self.save, "%s-%d" % (kind, n))
        if data is not None:
            with open(stem + ext, "wb") as f:
                f.write(data)
        with open(stem + ".args", "w") as f:
            f.write("\n".join(rec["args"]) + "\n")

    # one generator per kind: yields (op, args, data, ext, must_fail, needle)
    def gen_json(self):
        seeds = sorted(os.path.join(EX, "..", e, "model.json") for e in os.listdir(os.path.join(SRC, "examples")))
        for base in ("/work/shared/real-json", os.path.join(SRC, "tests/frontend/data/real2"),
                     os.path.join(SRC, "tests/frontend/data/real3")):
            if os.path.isdir(base):
                seeds += sorted(os.path.join(base, f) for f in os.listdir(base) if f.endswith(".json"))
        seeds = [s for s in seeds if os.path.isfile(s)]
        cases = []
        for s in seeds:
            with open(s, "rb") as f:
                text = f.read()
            try:
                t = text.decode()
            except UnicodeDecodeError:
                continue
            for op, b in json_mutants(t, self.rng):
                op = "%s %s: %s" % (op, os.path.basename(s), diff_context(text, b))
                cases.append((op, ["compile", "@IN", "--batch", "2", "-o", "@OUT"], b, ".json",
                              op.split()[0] in ("truncate", "empty", "nul", "deep-nesting", "deep-top",
                                                "dangling-ref", "trailing"), "in.json"))
        self.rng.shuffle(cases)
        return cases[:self.n]

    def gen_layout(self):
        with open(os.path.join(EX, "layout.json")) as f:
            lay = f.read()
        muts = [(op, b, op in ("truncate", "empty", "nul")) for op, b in json_mutants(lay, self.rng)]
        extra = {"unknown-axis": {"d1/kernel": [None, "nope"]}, "repeat-axis": {"d1/kernel": ["model", "model"]},
                 "rank": {"d1/kernel": [None, None, "model"]}, "rank0": {"d1/kernel": []},
                 "bad-regex": {"d1/(kernel": [None, "model"]}, "bad-regex2": {"[": ["model"]},
                 "regex-star": {"*": [None, "model"]}, "empty-key": {"": [None, "model"]},
                 "num-entry": {"d1/kernel": [None, 3]}, "obj-entry": {"d1/kernel": {"a": 1}},
                 "null-entry": {"d1/kernel": None}, "str-entry": {"d1/kernel": "model"},
                 "indivisible": {"d1/kernel": ["model", None]}, "data-on-weight": {"d1/kernel": ["data", "model"]},
                 "list-in-entry": {"d1/kernel": [[], "model"]}, "nested-axes": {"d1/kernel": [["data", "data"], None]},
                 "regex-bomb": {"(a+)+$": [None, "model"]}, "regex-backref": {"(d)\\1\\9": [None, "model"]},
                 "output-rank": {"d2/output": ["data", None, None]}, "unicode": {"d\u00e91/kernel": [None, "model"]}}
        for op, lm in extra.items():
            muts.append((op, json.dumps({"batch_dim_name": "data", "layout_map": lm}).encode(),
                         op not in ("rank0", "regex-star", "empty-key", "regex-bomb", "regex-backref", "unicode",
                                    "indivisible", "data-on-weight", "output-rank")))
        for bd in ["", "nope", None, 3, ["data"], "model"]:
            muts.append(("batch-dim", json.dumps({"batch_dim_name": bd, "layout_map": {}}).encode(), bd not in ("model", None)))
        cases = [(op, ["compile", "@SRC/examples/mnist_mlp/model.json", "--batch", "16", "--mesh", "2x4",
                       "--layout", "@IN", "-o", "@OUT"], b, ".json", must, "in.json") for op, b, must in muts]
        self.rng.shuffle(cases)
        return cases[:self.n]

    def gen_mesh(self):
        return [(None, a, None, "", True, "--" + ("axes" if "--axes" in a else "mesh") + "|model.json") for _, a, _ in mesh_cases()]

    def gen_cli(self):
        return [(None, a, None, "", False, None) for _, a, _ in cli_cases()]

    def gen_npy(self):
        cases = []
        with open(os.path.join(EX, "input.npy"), "rb") as f:
            x = f.read()
        for op, b, must in npy_mutants(x, self.rng, (37, 28, 28, 1)):
            cases.append(("run-" + op, ["run", "@PLAN", "--input", "@IN", "--output", "@OUT"], b, ".npy", must,
                          "in.npy"))
        with open(os.path.join(EX, "train_x.npy"), "rb") as f:
            tx = f.read()
        with open(os.path.join(EX, "train_y.npy"), "rb") as f:
            ty = f.read()
        fit = ["run", "@TRAIN", "--fit", "--epochs", "1", "--batch-size", "32", "--quiet", "--save-weights", "@OUT",
               "--history", "@OUT2"]
        for op, b, must in self.rng.sample(npy_mutants(tx, self.rng, (96, 28, 28, 1)), 25):
            cases.append(("fit-x-" + op, fit + ["--x", "@IN", "--y", "@SRC/examples/mnist_mlp/train_y.npy"],
                          b, ".npy", must, "in.npy"))
        for op, b, must in self.rng.sample(npy_mutants(ty, self.rng, (96, 10)), 25):
            cases.append(("fit-y-" + op, fit + ["--x", "@SRC/examples/mnist_mlp/train_x.npy", "--y", "@IN"],
                          b, ".npy", must, "in.npy"))
        self.rng.shuffle(cases)
        return cases[:self.n]

    def gen_safetensors(self):
        cases = []
        for src in (os.path.join(EX, "weights.safetensors"), self.weights):
            with open(src, "rb") as f:
                b = f.read()
            for op, m, must in st_mutants(b, self.rng):
                cases.append((op, ["compile", "@SRC/examples/mnist_mlp/model.json", "--weights", "@IN", "--batch", "8",
                                   "-o", "@OUT"], m, ".safetensors", must, "in.safetensors"))
        with open(self.weights, "rb") as f:
            b = f.read()
        for op, m, must in self.rng.sample(st_mutants(b, self.rng), 30):
            cases.append(("init-" + op, ["run", "@TRAIN", "--fit", "--x", "@SRC/examples/mnist_mlp/train_x.npy",
                                         "--y", "@SRC/examples/mnist_mlp/train_y.npy", "--epochs", "1", "--quiet",
                                         "--initial-weights", "@IN", "--save-weights", "@OUT"],
                          m, ".safetensors", must, "in.safetensors"))
        self.rng.shuffle(cases)
        return cases[:self.n]

    def gen_plan(self):
        cases = []
        for src in (self.plan, self.train):
            with open(src, "rb") as f:
                b = f.read()
            for op, m, must, fixed in plan_mutants(b, self.rng):
                cases.append(("inspect-" + op, ["inspect", "@IN"], m, ".plan", must, "in.plan"))
                if not fixed or op.startswith("payload-") or self.rng.random() < 0.2:
                    if src == self.plan:
                        cases.append(("run-" + op, ["run", "@IN", "--input", "@SRC/examples/mnist_mlp/input.npy",
                                                    "--output", "@OUT"], m, ".plan", must, "in.plan"))
                    else:
                        cases.append(("fit-" + op, ["run", "@IN", "--fit", "--x",
                                                    "@SRC/examples/mnist_mlp/train_x.npy", "--y",
                                                    "@SRC/examples/mnist_mlp/train_y.npy", "--epochs", "1",
                                                    "--quiet", "--save-weights", "@OUT"], m, ".plan", must,
                                      "in.plan"))
        self.rng.shuffle(cases)
        return cases[:self.n]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kdc", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n", type=int, default=400, help="cases per kind (at most)")
    ap.add_argument("--kinds", default="json,layout,mesh,npy,safetensors,plan,cli")
    ap.add_argument("--save")
    ap.add_argument("--jobs", type=int, default=1)
    args = ap.parse_args()
    fz = Fuzz(args)
    fz.setup()
    summary = {}
    with open(os.path.join(fz.work, "results.jsonl"), "a") as log:
        for kind in args.kinds.split(","):
            cases = getattr(fz, "gen_" + kind)()
            with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
                futs = [ex.submit(fz.run_case, kind, op or "-", a, data, ext, must, needle)
                        for op, a, data, ext, must, needle in cases]
                for f in futs:
                    rec = f.result()
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    summary.setdefault(kind, {}).setdefault(rec["class"], 0)
                    summary[kind][rec["class"]] += 1
                    if rec["class"] == "bug":
                        print("BUG %s %s %s: %s | %s" % (kind, rec["op"], rec["why"], " ".join(rec["args"]),
                                                       rec["err"].strip().split("\n")[0][:200]), flush=True)
            print(kind, summary.get(kind), flush=True)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
