/* tools/run_place.h: the process-placement flags of `kdc run` (run_place.c);
 * the placement itself is the API's (api/place.c). */
#ifndef KDC_TOOLS_RUN_PLACE_H
#define KDC_TOOLS_RUN_PLACE_H

#include "kdc/kdc.h"
#include "tools/cli.h"

/* --coordinator, --num-processes, --process-id, --local-device-ids into |ro|. */
bool run_place_flag(cli_args *a, kdc_run_options *ro, kdc_status *st);

#endif
