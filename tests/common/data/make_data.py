# Regenerates the NumPy reference files in this folder (tests/common/data).
# Made with numpy 1.24.2 (Debian bookworm python3-numpy):
#     cd tests/common/data && /usr/bin/python3 make_data.py
# test_npy.c reads each file and also checks that kdc_npy_write reproduces
# the v1.0 files byte for byte.
import numpy as np

np.save("f32_2x3.npy", np.arange(6, dtype="<f4").reshape(2, 3) * 0.5)
np.save("f64_4.npy", np.array([1.5, -2.25, 1e300, 3.0], dtype="<f8"))
np.save("i32_scalar.npy", np.array(-7, dtype="<i4"))
np.save("i64_5.npy", np.arange(5, dtype="<i8") - 2)
np.save("bool_2x2.npy", np.array([[True, False], [False, True]]))
np.save("u8_0x3.npy", np.zeros((0, 3), dtype=np.uint8))
np.save("f16_3.npy", np.array([1.0, -0.5, 65504.0], dtype="<f2"))
# Format 2.0 and 3.0 headers (u32 header length).
a = np.arange(4, dtype="<f4")
for v in [(2, 0), (3, 0)]:
    with open("f32_4_v%d.npy" % v[0], "wb") as f:
        np.lib.format.write_array(f, a, version=v)
# Unsupported on purpose: Fortran order and big endian.
np.save("fortran_2x3.npy", np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
np.save("big_endian.npy", np.arange(3, dtype=">f4"))
