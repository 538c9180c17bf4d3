/*
 * frontend/layout.h: the device mesh from the command line and the Keras
 * distribution rules from layout.json (KERAS.md 1; docs/layout.md).
 *
 *   mesh.c    --mesh 2x4 [--axes data,model]  ->  kdc_mesh
 *   layout.c  layout.json (a Keras ModelParallel written as JSON) -> kdc_layout;
 *             LayoutMap lookup (exact key, then Python regexes through PCRE2),
 *             resolution of a rule against a tensor shape -> kdc_sharding,
 *             the data (batch) sharding of inputs, unmatched-rule warnings.
 *
 * Every error is a KDC_INVALID_INPUT status (KDC_UNSUPPORTED where a kdc cap
 * is hit) whose one-line message starts with the flag or the file name as the
 * caller gave it, then the place (a column, a JSON path), then what is wrong:
 *     --mesh "2x": expected a positive integer after 'x' at column 3
 *     layout.json: layout_map["d1/kernel"][1]: expected an axis name or null, got 3
 * Nothing here prints except kdc_layout_report_unmatched.
 */
#ifndef KDC_FRONTEND_LAYOUT_H
#define KDC_FRONTEND_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/ir.h"
#include "kdc/status.h"

/* ---- mesh.c --------------------------------------------------------------- */

/* The largest mesh kdc accepts, in devices: 4096, the plan format's limit
 * (KDC_PROG_MAX_DEVICES, runtime/program.h; docs/layout.md says why). */
#define KDC_MESH_MAX_DEVICES ((int64_t)4096)

/* Parses the --mesh |shape| ("8", "2x4", "2x2x2": positive decimal sizes
 * joined by a lowercase 'x', at most KDC_MAX_MESH_AXES of them, nothing else,
 * no spaces) and the --axes |axes| ("data,model": comma-separated identifiers
 * of at most 31 bytes, unique, one per mesh axis).  |axes| NULL takes the
 * defaults: "data" (1-D), "data,model" (2-D), and "data,model,axis2,axis3..."
 * for higher ranks.  On success *|out| is fully written (unused name slots
 * zeroed); on error it is left zeroed. */
kdc_status kdc_mesh_parse(const char *shape, const char *axes, kdc_mesh *out);

/* ---- layout.c ------------------------------------------------------------- */

/* How keys that are not an exact hit are tried as regexes (KERAS.md 1.3). */
typedef enum kdc_layout_match {
  KDC_LAYOUT_MATCH_FULLMATCH, /* re.fullmatch: Keras >= 3.14 (the default) */
  KDC_LAYOUT_MATCH_SEARCH,    /* re.search: Keras 3.0 - 3.13 */
} kdc_layout_match;

/* A loaded layout.json: the batch dim name, the match mode and the ordered
 * LayoutMap rules.  Opaque; read it through the functions below. */
typedef struct kdc_layout kdc_layout;

/* Reads and parses the layout file at |path|; |path| names the file in every
 * later message.  The caller frees *|out| with kdc_layout_free. */
kdc_status kdc_layout_load(const char *path, kdc_layout **out);
/* The same from memory: |text| holds |len| bytes of JSON; |filename| is used
 * in messages only. */
kdc_status kdc_layout_parse(const char *text, size_t len, const char *filename,
                            kdc_layout **out);
void kdc_layout_free(kdc_layout *l);

/* Checks every rule and batch_dim_name against |mesh| the way a Keras
 * LayoutMap with a device_mesh does on insert: each axis name must be a mesh
 * axis, and (as JAX requires) no axis may split two dims of one layout.  Call
 * it once after loading, so that a wrong rule fails even if it matches
 * nothing.  kdc_layout_resolve repeats the check for the rules it uses. */
kdc_status kdc_layout_check(const kdc_layout *l, const kdc_mesh *mesh);

/* The match mode: from the file's "match" key, else fullmatch.  The
 * --layout-match flag overrides the file through kdc_layout_set_match. */
kdc_layout_match kdc_layout_get_match(const kdc_layout *l);
void kdc_layout_set_match(kdc_layout *l, kdc_layout_match m);
/* "fullmatch" / "search"; *_from_name returns false for anything else. */
const char *kdc_layout_match_name(kdc_layout_match m);
bool kdc_layout_match_from_name(const char *s, kdc_layout_match *out);

/* batch_dim_name from the file, or NULL when absent or null (then the mesh's
 * first axis is the batch axis, as in Keras). */
const char *kdc_layout_batch_dim_name(const kdc_layout *l);
const char *kdc_layout_filename(const kdc_layout *l);
size_t kdc_layout_rule_count(const kdc_layout *l);
const char *kdc_layout_rule_key(const kdc_layout *l, size_t i); /* file order */

/* LayoutMap.__getitem__(|path|): the index of the rule for |path| in
 * *|out_rule|, or -1 when no rule applies (replicated).  An exact key wins;
 * otherwise every key is a Python regex tried with the match mode, and two or
 * more hits are an error listing them all.  An invalid regex is an error the
 * first time a lookup needs the regex phase (Python raises re.error there
 * too).  A returned rule is marked as used (see report_unmatched). */
kdc_status kdc_layout_lookup(const kdc_layout *l, const char *path, int *out_rule);

/* Resolves the layout of the tensor |path| (a variable path such as
 * "d1/kernel", or a layer output "d2/output") of rank |rank| and shape |dims|
 * on |mesh|.  |l| may be NULL (DataParallel: no rules).  On success *|out| is
 * a present sharding with every dim closed: dim d split by the rule's axis d,
 * dims past the rule's length unsplit.  *|out_found| tells whether a rule
 * applied; when none did, *|out| is the fully replicated sharding (Keras
 * replicates such tensors).  Errors: a rule longer than |rank|, an axis not in
 * the mesh, an axis used twice, a dim not divisible by its axis size (named
 * with the rule, dim, size, axis and axis size), a lookup error. */
kdc_status kdc_layout_resolve(const kdc_layout *l, const kdc_mesh *mesh, const char *path,
                              int rank, const int64_t *dims, kdc_sharding *out,
                              bool *out_found);

/* The sharding of the model input (or label) |input_name| of shape |dims|:
 * dim 0 (the batch) split, every other dim unsplit, all closed.  With a
 * layout (ModelParallel) the batch is split over batch_dim_name, or the
 * mesh's first axis when the file names none (KERAS.md 1.6).  With |l| NULL
 * the batch is split over ALL mesh axes, major to minor: that is Keras
 * DataParallel over the flattened 1-D list of the mesh's devices (Keras's own
 * DataParallel on a multi-axis mesh would use axis 0 only).  A batch not
 * divisible by the shard count is an error naming the input, the batch size
 * and the shard count.  A rank-0 input is an error (no batch dim). */
kdc_status kdc_layout_data_sharding(const kdc_layout *l, const kdc_mesh *mesh,
                                    const char *input_name, int rank, const int64_t *dims,
                                    kdc_sharding *out);

/* Writes one warning line to |warn| for each rule that no lookup has returned
 * since loading, e.g.
 *     layout.json: warning: layout_map["d1/bias"] matches no variable or layer output
 * Returns the number of lines written.  Call it after every variable and
 * layer output has been resolved. */
size_t kdc_layout_report_unmatched(const kdc_layout *l, FILE *warn);

#endif
