# packaging/install_deps.cmake (an install script, packaging/CMakeLists.txt):
# copies every shared library that KDC_DEP_EXECUTABLES and KDC_DEP_LIBRARIES
# load, recursively, into PREFIX/lib -- except the C library's own, which
# every Linux has and which must match the machine's ld.so (docs/gpu.md,
# "Bundle"; tests/bundle/check_libs.sh holds the same list).
#
# libstdc++, libgcc_s and libz are copied: an older distribution's
# libstdc++ lacks the GLIBCXX versions the build machine's compiler
# requires, and "only glibc and the NVIDIA driver" promises none of them.
set(KDC_SYSTEM_LIBS
    "^(ld-linux-x86-64\\.so\\.2|linux-vdso\\.so\\.1|lib(c|m|dl|rt|pthread|resolv|util|anl)\\.so\\.[0-9.]+)$")
file(GET_RUNTIME_DEPENDENCIES
     EXECUTABLES ${KDC_DEP_EXECUTABLES}
     LIBRARIES ${KDC_DEP_LIBRARIES}
     RESOLVED_DEPENDENCIES_VAR deps
     UNRESOLVED_DEPENDENCIES_VAR missing
     CONFLICTING_DEPENDENCIES_PREFIX conflict
     PRE_EXCLUDE_REGEXES "${KDC_SYSTEM_LIBS}")
if(missing)
  message(FATAL_ERROR "kdc install: shared libraries not found: ${missing}")
endif()
if(conflict_FILENAMES)
  foreach(f ${conflict_FILENAMES})
    message(FATAL_ERROR "kdc install: ${f} resolves to several files: ${conflict_${f}}")
  endforeach()
endif()
set(lib "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/lib")
foreach(d ${deps})
  # the loader looks for the NEEDED name (the SONAME, usually a link to
  # the versioned file): install that link and what it points to
  file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/lib" TYPE SHARED_LIBRARY
       FOLLOW_SYMLINK_CHAIN FILES "${d}")
  # A copied library's own search path (Open MPI's RUNPATH names its
  # install directory) would send its dependencies' lookup out of the
  # bundle: it becomes $ORIGIN (shorter, so it is rewritten in place;
  # $ORIGIN/../lib, libLLVM's, already points at lib/ and stays).
  get_filename_component(name "${d}" NAME)
  get_filename_component(real "${lib}/${name}" REALPATH)
  unset(rpath)
  unset(runpath)  # READ_ELF leaves them alone when the file has none
  file(READ_ELF "${real}" RPATH rpath RUNPATH runpath)
  foreach(old "${rpath}" "${runpath}")
    if(old AND NOT old MATCHES "^\\$ORIGIN(/\\.\\./lib)?/?$")
      file(RPATH_CHANGE FILE "${real}" OLD_RPATH "${old}" NEW_RPATH "$ORIGIN")
    endif()
  endforeach()
endforeach()
