/* Glob and dotted-prefix matching for the filters: see glob.h.  Plain C,
 * no allocation; shared with frametrace._testing. */
#include "glob.h"

int
ft_glob_is_glob(const uint32_t *pat, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (pat[i] == '*' || pat[i] == '?' || pat[i] == '[') {
            return 1;
        }
    }
    return 0;
}

/* The end of the set opening at pat[i] == '[' (the index of its "]"), or 0
 * when it has none: then fnmatch takes the "[" literally.  As fnmatch: a
 * "!" after "[" negates, a "]" right after "[" or "[!" is a member. */
static size_t
set_end(const uint32_t *pat, size_t plen, size_t i)
{
    size_t j = i + 1;
    if (j < plen && pat[j] == '!') {
        j++;
    }
    if (j < plen && pat[j] == ']') {
        j++;
    }
    while (j < plen && pat[j] != ']') {
        j++;
    }
    return j < plen ? j : 0;
}

/* Whether c is in the set pat[i + 1 .. end) (i at "[").  Ranges "a-z"; a
 * range whose ends are reversed is empty, as fnmatch makes it; "-" first or
 * last is a member. */
static int
set_has(const uint32_t *pat, size_t i, size_t end, uint32_t c)
{
    size_t j = i + 1;
    int negate = 0;
    if (pat[j] == '!') {
        negate = 1;
        j++;
    }
    int found = 0;
    while (j < end) {
        uint32_t lo = pat[j];
        /* A range: "a-b" with b before the set's end.  fnmatch (3.7+)
         * splits the set at "-" from its second member on, so a "]" taken
         * as the first member can also start one. */
        if (j + 2 < end && pat[j + 1] == '-') {
            uint32_t hi = pat[j + 2];
            if (lo <= c && c <= hi) {
                found = 1;
            }
            j += 3;
        }
        else {
            if (c == lo) {
                found = 1;
            }
            j++;
        }
    }
    return found != negate;
}

int
ft_glob_match(const uint32_t *pat, size_t plen, const uint32_t *name,
              size_t nlen)
{
    /* Greedy with one backtrack point, the last "*": a later "*" can always
     * absorb what an earlier one would have had to. */
    size_t p = 0, n = 0;
    size_t star_p = (size_t)-1, star_n = 0;
    while (n < nlen) {
        if (p < plen) {
            uint32_t pc = pat[p];
            if (pc == '*') {
                star_p = p++;
                star_n = n;
                continue;
            }
            if (pc == '?') {
                p++;
                n++;
                continue;
            }
            if (pc == '[') {
                size_t end = set_end(pat, plen, p);
                if (end != 0) {
                    if (set_has(pat, p, end, name[n])) {
                        p = end + 1;
                        n++;
                        continue;
                    }
                    goto backtrack;
                }
                /* no "]": a literal "[" */
            }
            if (pc == name[n]) {
                p++;
                n++;
                continue;
            }
        }
    backtrack:
        if (star_p == (size_t)-1) {
            return 0;
        }
        p = star_p + 1;
        n = ++star_n;
    }
    while (p < plen && pat[p] == '*') {
        p++;
    }
    return p == plen;
}

int
ft_pattern_match(const uint32_t *pat, size_t plen, int is_glob,
                 const uint32_t *name, size_t nlen)
{
    if (is_glob) {
        return ft_glob_match(pat, plen, name, nlen);
    }
    if (nlen < plen || (nlen > plen && name[plen] != '.')) {
        return 0;
    }
    for (size_t i = 0; i < plen; i++) {
        if (pat[i] != name[i]) {
            return 0;
        }
    }
    return 1;
}
