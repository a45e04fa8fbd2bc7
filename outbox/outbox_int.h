/*
 * outbox_int.h - internals shared by the files of outbox/ (not an API).
 */
#ifndef OUTBOX_INT_H
#define OUTBOX_INT_H

#include "common/sf_base.h"

/* true when topic is 1..249 bytes of [a-zA-Z0-9._-] and not "." or "..". */
bool outbox_topic_valid(const char *topic);

#endif
