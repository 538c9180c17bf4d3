/*
 * tools/cli.h: the kdc command line's internal header.  tools/ is thin: it
 * parses flags, calls the libraries, and maps a kdc_status to an exit code
 * (0 ok, 2 bad input, 3 internal error).  Each subcommand lives in its own
 * file (cmd_compile.c, cmd_run.c, cmd_fit.c, cmd_inspect.c, cmd_devices.c).
 */
#ifndef KDC_TOOLS_CLI_H
#define KDC_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kdc/status.h"

/* A cursor over argv for one subcommand. */
typedef struct cli_args {
  int argc;
  char **argv;
  int i;
} cli_args;

/* If argv[i] is |flag| (or "--flag=value"), stores its value and advances.
 * A flag without a value is a usage error (status). */
bool cli_flag_value(cli_args *a, const char *flag, const char **out, kdc_status *st);
bool cli_flag(cli_args *a, const char *flag);
/* Plain decimal numbers only: no spaces, '+', hex, inf or nan; errors name
 * |flag|. */
kdc_status cli_parse_i64(const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
kdc_status cli_parse_u64(const char *flag, const char *s, uint64_t *out);
kdc_status cli_parse_double(const char *flag, const char *s, double *out);
kdc_status cli_unknown(const cli_args *a);

int kdc_cmd_compile(int argc, char **argv);
int kdc_cmd_run(int argc, char **argv);
/* `kdc run --fit` / `--evaluate` (cmd_fit.c); kdc_cmd_run dispatches. */
int kdc_cmd_fit(int argc, char **argv);
int kdc_cmd_inspect(int argc, char **argv);
/* `kdc devices` (cmd_devices.c). */
int kdc_cmd_devices(int argc, char **argv);
/* cmd_run.c: the plan's predict over .npy |inputs| (global arrays, any
 * number of rows, in batches of the compiled batch), writing |outputs|
 * (process 0 only): `kdc run` and `kdc run --fit --predict X --output Y`. */
struct kdc_plan;
kdc_status cli_predict(struct kdc_plan *plan, const char *path, const char *const *inputs,
                       size_t n_inputs, const char *const *outputs, size_t n_outputs);

/* Ends the command's output set (common/io.h kdc_outputs_begin): its files
 * are renamed into place when |st| is NULL, removed otherwise; returns |st|
 * or the rename's error. */
kdc_status cli_outputs_end(kdc_status st);

/* Prints "kdc: error: <message>" (one line) and returns the exit status for
 * |st|'s code; frees |st|. */
int cli_fail(kdc_status st);

#endif
