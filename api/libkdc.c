/* libkdc.so: the folder libraries linked whole (api/CMakeLists.txt); the
 * version script libkdc.map exports only the KDC_API functions of
 * include/kdc/kdc.h and include/kdc/error.h. */
#include "kdc/kdc.h"
