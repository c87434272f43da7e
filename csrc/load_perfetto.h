/* The .pftrace reader's shared declarations: the messages
 * load_perfetto_messages.c decodes, for load_perfetto.c to assemble into
 * Events.  Each decoder: 0, or -1 with why set. */
#ifndef FT_LOAD_PERFETTO_H
#define FT_LOAD_PERFETTO_H

#include "pb_wire.h"

enum { SLICE_BEGIN = 1, SLICE_END = 2 };

/* A TrackEvent's fields. */
typedef struct {
    uint64_t type, track, name_iid, cat_iid, loc_iid;
    int has_track, has_cat_iid;
    buf_t name, cat;
    uint8_t oas, oast, oal;
} track_event_t;

/* A ClockSnapshot: the clocks' (id, timestamp, incremental) into ids...,
 * at most 4. */
typedef struct {
    uint64_t id, ts;
    int incremental;
} snap_clock_t;

/* An interned entry (iid 1, name 2); both required. */
int ft_pf_interned_entry(buf_t b, uint64_t *iid, buf_t *name, why_t *why);
/* A TrackEvent: a slice begin or end (anything else is refused). */
int ft_pf_read_track_event(buf_t b, track_event_t *te, why_t *why);
/* A ClockSnapshot's clocks into clocks[*n], at most 4. */
int ft_pf_read_snapshot(buf_t b, snap_clock_t *clocks, int *n, why_t *why);
/* TracePacketDefaults: its clock id and default track (0: none). */
int ft_pf_read_defaults(buf_t b, uint64_t *clock_id, uint64_t *track,
                        why_t *why);
/* A ProcessDescriptor (pid 1, name_num the name) or ThreadDescriptor
 * (pid 1, tid 2, name_num the name; tid not NULL). */
int ft_pf_read_desc(buf_t b, uint64_t *pid, uint64_t *tid, buf_t *name,
                    uint32_t name_num, why_t *why);

#endif
