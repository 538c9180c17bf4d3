#!/usr/bin/env bash
# tests/bundle/test_install.sh BUILD_DIR SOURCE_DIR CMAKE: the ctest of the
# bundle's layout (label bundle; no xz: `cmake --install` into a temporary
# prefix, docs/gpu.md "Bundle").  Checks that every library resolves inside
# the prefix or to glibc (check_libs.sh), then moves the prefix elsewhere
# and runs the installed kdc from there, with no build directory on any
# search path: the 2x4 mesh MNIST example (the guide's ModelParallel layout)
# against its TF.js expected output, and a CUDA plan (the NVPTX backend
# linked in; its run fails for want of a GPU here, exit 3); then
# device_check.sh's dry run from the installed tree.
set -u
B=$1; S=$2; CMAKE=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
"$CMAKE" --install "$B" --prefix "$T/first" >"$T/install.log" 2>&1 || { cat "$T/install.log"; echo "FAIL install"; exit 1; }
mv "$T/first" "$T/moved"   # relocated: nothing may point at the install prefix either
K=$T/moved
bash "$S/tests/bundle/check_libs.sh" "$K" || fail=1
for f in bin/kdc lib/libkdc.so include/kdc/kdc.h share/kdc/device_check.sh share/kdc/docs/gpu.md \
         share/kdc/examples/mnist_mlp/model.json; do
  [ -e "$K/$f" ] || { echo "FAIL layout: $f missing"; fail=1; }
done
# no path into the build tree in what runs (string constants, the dynamic
# section; a Debug build's debug info may name it)
for f in bin/kdc lib/libkdc.so; do
  if readelf -W -p .rodata -p .dynstr "$K/$f" 2>/dev/null | grep -qF "$B/"; then
    echo "FAIL relocatable: $f names the build directory $B"; fail=1
  fi
done
E=$K/share/kdc/examples/mnist_mlp
cd "$T"
# an empty environment (but the sanitizer build's leak suppressions)
run() { env -i PATH=/usr/bin:/bin HOME="$T" KDC_CACHE_DIR="$T/cache" ${LSAN_OPTIONS:+LSAN_OPTIONS="$LSAN_OPTIONS"} \
        "$K/bin/kdc" "$@"; }
if run compile "$E/model.json" --weights "$E/weights.safetensors" --mesh 2x4 --layout "$E/layout.json" -o m.plan >log 2>&1 &&
   run run m.plan --input "$E/input.npy" --output p.npy >>log 2>&1; then
  if python3 -c "
import numpy as np, sys
p, e = np.load('p.npy'), np.load('$E/expected.npy')
d = np.abs(p - e).max()
ok = p.shape == e.shape and np.allclose(p, e, rtol=1e-4, atol=1e-5)
print(('PASS' if ok else 'FAIL') + f' installed kdc, mnist_mlp on --mesh 2x4: {p.shape}, max |kdc - TF.js| = {d:.2g}')
sys.exit(0 if ok else 1)"; then :; else fail=1; fi
else cat log; echo "FAIL installed kdc: compile/run of mnist_mlp on --mesh 2x4"; fail=1; fi
if run compile "$E/model.json" --weights "$E/weights.safetensors" --target cuda --sm 90 -o c.plan >log 2>&1; then
  run run c.plan --input "$E/input.npy" --output c.npy >log 2>&1; rc=$?
  if [ $rc = 0 ] || { [ $rc = 3 ] && grep -q "no CUDA device" log; }; then
    echo "PASS installed kdc, CUDA plan (sm_90): compiled; run exit $rc"
  else cat log; echo "FAIL installed kdc: CUDA plan run exit $rc"; fail=1; fi
else
  if grep -q "built without CUDA" log; then echo "SKIP CUDA plan: this kdc was built without CUDA"
  else cat log; echo "FAIL installed kdc: CUDA compile"; fail=1; fi
fi
# the device check's own plumbing, from the installed tree (CPU plans stand
# in for CUDA plans: docs/gpu.md, "The device check")
KDC_DEVICE_CHECK_DRYRUN=1 bash "$K/share/kdc/device_check.sh" "$K" "$T/dc" --quick --no-peers \
  > "$T/dc.txt" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q "^SUMMARY: [0-9]* passed, 0 failed" "$T/dc.txt" && [ -s "$T/dc/figures.json" ]; then
  echo "PASS device_check.sh dry run: $(grep '^SUMMARY' "$T/dc.txt")"
else
  cat "$T/dc.txt"; echo "FAIL device_check.sh dry run: exit $rc"; fail=1
fi
exit $fail
