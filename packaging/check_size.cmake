# cmake -DTARBALL=F -DLIMIT_MIB=N -P check_size.cmake: the bundle's size,
# printed, and an error above the limit (it travels to the GPU machine
# together with the checkout, in 64 MiB: docs/gpu.md, "Bundle").
file(SIZE "${TARBALL}" bytes)
math(EXPR limit "${LIMIT_MIB} * 1048576")
math(EXPR kib "${bytes} / 1024")
if(bytes GREATER limit)
  message(FATAL_ERROR "bundle: ${TARBALL} is ${kib} KiB, over the ${LIMIT_MIB} MiB limit")
endif()
message(STATUS "bundle: ${TARBALL}: ${bytes} bytes (${kib} KiB; limit ${LIMIT_MIB} MiB)")
