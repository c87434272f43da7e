/* The .pftrace reader's messages (load_perfetto.h): a TracePacket's
 * TrackEvent, ClockSnapshot, TracePacketDefaults, process and thread
 * descriptors and interned entries, decoded from the wire into C values;
 * what they mean to the trace is load_perfetto.c's. */
#include "load_perfetto.h"

#include <string.h>

int
ft_pf_interned_entry(buf_t b, uint64_t *iid, buf_t *name, why_t *why)
{
    field_t f;
    int rc;
    *iid = 0;
    name->p = name->end = NULL;
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num == 1) {
            if (expect(&f, WT_VARINT, why) < 0) {
                return -1;
            }
            *iid = f.v;
        }
        else if (f.num == 2) {
            if (expect(&f, WT_LEN, why) < 0) {
                return -1;
            }
            *name = f.sub;
        }
    }
    if (rc < 0) {
        return -1;
    }
    if (*iid == 0 || name->p == NULL) {
        return bad(why, "an interned entry without iid or name");
    }
    return 0;
}

static int
read_annotation(buf_t b, track_event_t *te, why_t *why)
{
    field_t f;
    int rc;
    buf_t name = {NULL, NULL};
    uint64_t value = 0;
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num == 10) {
            if (expect(&f, WT_LEN, why) < 0) {
                return -1;
            }
            name = f.sub;
        }
        else if (f.num == 2) {
            if (expect(&f, WT_VARINT, why) < 0) {
                return -1;
            }
            value = f.v;
        }
    }
    if (rc < 0) {
        return -1;
    }
    size_t n = name.p ? (size_t)(name.end - name.p) : 0;
    static const char *flags[3] = {"open_at_start", "open_at_stop",
                                   "open_at_loss"};
    uint8_t *slots[3] = {&te->oas, &te->oast, &te->oal};
    for (int i = 0; i < 3; i++) {
        if (n == strlen(flags[i]) && memcmp(name.p, flags[i], n) == 0) {
            *slots[i] = value != 0;
        }
    }
    return 0;
}

int
ft_pf_read_track_event(buf_t b, track_event_t *te, why_t *why)
{
    field_t f;
    int rc;
    memset(te, 0, sizeof(*te));
    while ((rc = next_field(&b, &f, why)) > 0) {
        switch (f.num) {
        case 9: case 10: case 11: case 3: case 34:
            if (f.num == 3 && f.wt == WT_LEN) {
                return bad(why, "packed category iids (no frametrace "
                           "file has them)");
            }
            if (expect(&f, WT_VARINT, why) < 0) {
                return -1;
            }
            if (f.num == 9) {
                te->type = f.v;
            }
            else if (f.num == 10) {
                te->name_iid = f.v;
            }
            else if (f.num == 11) {
                te->track = f.v;
                te->has_track = 1;
            }
            else if (f.num == 3) {
                if (te->has_cat_iid) {
                    return bad(why, "a slice of two categories");
                }
                te->cat_iid = f.v;
                te->has_cat_iid = 1;
            }
            else {
                te->loc_iid = f.v;
            }
            break;
        case 22: case 23: case 4:
            if (expect(&f, WT_LEN, why) < 0) {
                return -1;
            }
            if (f.num == 22) {
                if (te->cat.p != NULL) {
                    return bad(why, "a slice of two categories");
                }
                te->cat = f.sub;
            }
            else if (f.num == 23) {
                te->name = f.sub;
            }
            else if (read_annotation(f.sub, te, why) < 0) {
                return -1;
            }
            break;
        default:
            break;
        }
    }
    if (rc < 0) {
        return -1;
    }
    if (te->type != SLICE_BEGIN && te->type != SLICE_END) {
        return bad(why, "a track event that is no slice begin or end");
    }
    return 0;
}

int
ft_pf_read_snapshot(buf_t b, snap_clock_t *clocks, int *n, why_t *why)
{
    field_t f;
    int rc;
    *n = 0;
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num != 1) {
            continue;
        }
        if (expect(&f, WT_LEN, why) < 0) {
            return -1;
        }
        if (*n == 4) {
            return bad(why, "a clock snapshot of more than 4 clocks");
        }
        snap_clock_t *c = &clocks[(*n)++];
        memset(c, 0, sizeof(*c));
        buf_t s = f.sub;
        field_t g;
        while ((rc = next_field(&s, &g, why)) > 0) {
            if (g.num >= 1 && g.num <= 3) {
                if (expect(&g, WT_VARINT, why) < 0) {
                    return -1;
                }
                if (g.num == 1) {
                    c->id = g.v;
                }
                else if (g.num == 2) {
                    c->ts = g.v;
                }
                else {
                    c->incremental = g.v != 0;
                }
            }
        }
        if (rc < 0) {
            return -1;
        }
    }
    return rc;
}

int
ft_pf_read_defaults(buf_t b, uint64_t *clock_id, uint64_t *track, why_t *why)
{
    field_t f;
    int rc;
    *clock_id = 0;
    *track = 0;
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num == 58) {
            if (expect(&f, WT_VARINT, why) < 0) {
                return -1;
            }
            *clock_id = f.v;
        }
        else if (f.num == 11) {
            if (expect(&f, WT_LEN, why) < 0) {
                return -1;
            }
            buf_t s = f.sub;
            field_t g;
            while ((rc = next_field(&s, &g, why)) > 0) {
                if (g.num == 11) {
                    if (expect(&g, WT_VARINT, why) < 0) {
                        return -1;
                    }
                    *track = g.v;
                }
            }
            if (rc < 0) {
                return -1;
            }
        }
    }
    return rc;
}

int
ft_pf_read_desc(buf_t b, uint64_t *pid, uint64_t *tid, buf_t *name,
          uint32_t name_num, why_t *why)
{
    field_t f;
    int rc;
    while ((rc = next_field(&b, &f, why)) > 0) {
        if (f.num == 1 || (tid != NULL && f.num == 2)) {
            if (expect(&f, WT_VARINT, why) < 0) {
                return -1;
            }
            *(f.num == 1 ? pid : tid) = f.v;
        }
        else if (f.num == name_num) {
            if (expect(&f, WT_LEN, why) < 0) {
                return -1;
            }
            *name = f.sub;
        }
    }
    return rc;
}
