/*
 * kdc/error.h: the public half of kdc_status (STYLE.md 8-9), shared by the
 * C API (kdc/kdc.h) and the code inside kdc (kdc/status.h adds the makers).
 *
 * A status is NULL for success, or an owned heap object carrying a code and
 * a one-line located message, the same text `kdc` prints after
 * "kdc: error: ".  Whoever receives a non-NULL status owns it and must
 * either pass it on or call kdc_status_free().
 */
#ifndef KDC_ERROR_H
#define KDC_ERROR_H

#ifndef KDC_API
#define KDC_API __attribute__((visibility("default")))
#endif

typedef enum kdc_code {
  KDC_OK = 0,
  KDC_INVALID_INPUT,  /* a model, layout, plan, array or flag is wrong: exit 2 */
  KDC_UNSUPPORTED,    /* valid input that kdc does not handle yet: exit 2 */
  KDC_IO_ERROR,       /* a file cannot be opened, read or written: exit 2 */
  KDC_OUT_OF_MEMORY,  /* an allocation failed: exit 3 */
  KDC_UNAVAILABLE,    /* a device, peer or backend is missing or timed out: exit 3 */
  KDC_INTERNAL,       /* a broken invariant inside kdc: exit 3 */
} kdc_code;

typedef struct kdc_status_s *kdc_status;

KDC_API kdc_code kdc_status_code(kdc_status st);
KDC_API const char *kdc_status_message(kdc_status st);     /* "" for NULL */
KDC_API const char *kdc_status_file(kdc_status st);        /* C file that made it */
KDC_API int kdc_status_line(kdc_status st);
KDC_API void kdc_status_free(kdc_status st);
KDC_API const char *kdc_code_name(kdc_code code);
/* The process exit status tools/kdc uses for |code|: 0, 2 or 3. */
KDC_API int kdc_code_exit_status(kdc_code code);

#endif
