/*
 * channel.h - internal controls of the bounded channel (channel.c) for
 * sl_prefetch_auto: a depth that can change while the channel is used, and
 * a receive that reports what the consumer found.
 *
 * Protocol: the channel's ring has `capacity` slots from its creation; its
 * depth (the most samples a send admits) starts at the capacity and may be
 * set to any value in 1..capacity at any time, from any thread.  A depth
 * lowered below what is queued only stops further sends until the queue
 * drains below it (nothing is dropped); a depth raised wakes blocked
 * senders.
 */
#ifndef SLUICE_SYNC_CHANNEL_H
#define SLUICE_SYNC_CHANNEL_H

#include "core/internal.h"

/* What a receive found when it began (before any wait). */
enum {
  SL__CH_SEEN_EMPTY = 0, /* nothing queued: the consumer had to wait */
  SL__CH_SEEN_SOME = 1,  /* some queued, room for more */
  SL__CH_SEEN_FULL = 2   /* at the depth, or a sender was refused (bytes) */
};

/* Sets the depth to min(max(depth, 1), capacity).  Thread-safe. */
void sl__channel_set_depth(sl_channel *ch, size_t depth);

/* sl_channel_recv (blocking, one sample) that also stores in *seen one of
 * SL__CH_SEEN_* for the moment it began.  Same returns as sl_channel_recv.
 * Thread-safe. */
int sl__channel_recv_seen(sl_channel *ch, sl_sample **out, int *seen);

#endif /* SLUICE_SYNC_CHANNEL_H */
