/*
 * e2e_layout.h: a ModelParallel-style layout.json for any model, for the
 * mesh tests (test_e2e_mesh, test_e2e_real2).
 */
#ifndef KDC_TESTS_E2E_LAYOUT_H
#define KDC_TESTS_E2E_LAYOUT_H

#include <stdint.h>

#include "frontend/frontend.h"

/* The layout.json text (malloc'd) of a Keras LayoutMap for |km|: the batch
 * over "data"; "model" on the last dim of every rank >= 2 `.../kernel`
 * (Dense units, Conv filters, recurrent gates) and on the vocabulary of
 * every `.../embeddings` table, where |model| divides that dim.  *|rules|
 * gets the number of rules (0: nothing divides). */
char *e2e_column_layout(const kdc_keras_model *km, int64_t model, int *rules);

#endif
