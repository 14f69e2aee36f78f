/*
 * arrow.h - the arrow source's internal entry (arrow_reader.c): the
 * registry's "arrow" tag (src/open/registry.c) opens a parked stream.
 */
#ifndef SLUICE_FORMATS_ARROW_H
#define SLUICE_FORMATS_ARROW_H

#include "core/internal.h"

/* sl_open("arrow:NAME"): the stream parked under `name`
 * (sl_arrow_stream_park) as a reader, taken out of the table; SL_ENOTFOUND
 * when none is parked there. */
int sl__arrow_open_parked(const char *name, sl_reader **out);

#endif
