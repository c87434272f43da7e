/* Glob and dotted-prefix matching for the filters: see glob.h.  Plain C,
 * allocating only to read a "[...]" set as fnmatch does; shared with
 * frametrace._testing. */
#include "glob.h"

#include <stdlib.h>
#include <string.h>

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

/* Whether c is in the set pat[i + 1 .. end) (i at "["), exactly as
 * fnmatch.translate() makes it a regular expression set: from the second
 * member on, a "-" splits the set into chunks (the "-" after a chunk's
 * split is skipped: "a-c-e" is the range a-c, "-", "e"); a chunk whose
 * last member is above the next chunk's first is merged with it (an empty
 * range dropped); the chunks are joined by range operators, their own
 * hyphens literal; a leading "!" of the result negates it.  Then the set
 * is read as re reads one.  -1: out of memory. */
static int
set_has(const uint32_t *pat, size_t i, size_t end, uint32_t c)
{
    size_t s = i + 1, n = end - s;
    /* tokens: members, and SEP for the joining range operators */
    uint32_t *tok = malloc((2 * n + 2) * sizeof(uint32_t));
    unsigned char *sep = malloc(2 * n + 2);
    size_t *chunk_at = malloc((n + 2) * sizeof(size_t));  /* chunk starts */
    size_t *chunk_len = malloc((n + 2) * sizeof(size_t));
    uint32_t *chars = malloc((n + 2) * sizeof(uint32_t));  /* chunk text */
    int result = -1;
    if (!tok || !sep || !chunk_at || !chunk_len || !chars) {
        goto done;
    }
    size_t ntok = 0, nchunks = 0, nchars = 0;
    int hyphen = 0;
    for (size_t k = s; k < end; k++) {
        hyphen |= pat[k] == '-';
    }
    if (!hyphen) {
        for (size_t k = s; k < end; k++) {
            tok[ntok] = pat[k];
            sep[ntok++] = 0;
        }
    }
    else {
        size_t from = s;
        size_t k = pat[s] == '!' ? s + 2 : s + 1;
        for (;;) {
            while (k < end && pat[k] != '-') {
                k++;
            }
            if (k >= end) {
                break;
            }
            chunk_at[nchunks] = nchars;
            chunk_len[nchunks++] = k - from;
            for (size_t m = from; m < k; m++) {
                chars[nchars++] = pat[m];
            }
            from = k + 1;
            k += 3;
        }
        if (from < end) {
            chunk_at[nchunks] = nchars;
            chunk_len[nchunks++] = end - from;
            for (size_t m = from; m < end; m++) {
                chars[nchars++] = pat[m];
            }
        }
        else {
            /* an empty last chunk: its "-" joins the one before */
            chars[nchars++] = '-';
            chunk_len[nchunks - 1]++;
        }
        /* Merge reversed ranges, last first, as fnmatch does: chunk k-1
         * loses its last member, chunk k its first, and they become one.
         * The chunks' text is contiguous, so merging is moving lengths. */
        for (size_t k2 = nchunks - 1; k2 > 0; k2--) {
            size_t a = k2 - 1;
            if (chunk_len[a] == 0 || chunk_len[k2] == 0) {
                continue;  /* fnmatch would fail; cannot happen */
            }
            uint32_t last = chars[chunk_at[a] + chunk_len[a] - 1];
            uint32_t first = chars[chunk_at[k2]];
            if (last > first) {
                /* drop both ends: shift chunk k2's tail left over them */
                size_t dst = chunk_at[a] + chunk_len[a] - 1;
                size_t src = chunk_at[k2] + 1;
                size_t moved = chunk_len[k2] - 1;
                size_t after = nchars - (chunk_at[k2] + chunk_len[k2]);
                memmove(&chars[dst], &chars[src],
                        (moved + after) * sizeof(uint32_t));
                nchars -= 2;
                chunk_len[a] = chunk_len[a] - 1 + moved;
                for (size_t m = k2 + 1; m < nchunks; m++) {
                    chunk_at[m - 1] = chunk_at[m] - 2;
                    chunk_len[m - 1] = chunk_len[m];
                }
                nchunks--;
            }
        }
        for (size_t k2 = 0; k2 < nchunks; k2++) {
            if (k2 > 0) {
                tok[ntok] = '-';
                sep[ntok++] = 1;
            }
            for (size_t m = 0; m < chunk_len[k2]; m++) {
                tok[ntok] = chars[chunk_at[k2] + m];
                sep[ntok++] = 0;
            }
        }
    }
    if (ntok == 0) {
        result = 0;  /* an empty set: never matches */
        goto done;
    }
    size_t t = 0;
    int negate = 0;
    if (!sep[0] && tok[0] == '!') {
        negate = 1;
        t = 1;
    }
    int found = 0;
    /* As re's parser reads a set: a member, then a range operator ("-"
     * unescaped) and the range's end, unless the set ends there. */
    while (t < ntok) {
        uint32_t lo = tok[t++];
        if (t < ntok && sep[t] && t + 1 < ntok) {
            uint32_t hi = tok[t + 1];
            t += 2;
            found |= lo <= c && c <= hi;
        }
        else {
            found |= c == lo;
        }
    }
    result = found != negate;

done:
    free(tok);
    free(sep);
    free(chunk_at);
    free(chunk_len);
    free(chars);
    return result;
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
                    int has = set_has(pat, p, end, name[n]);
                    if (has < 0) {
                        return 0;  /* out of memory: no match */
                    }
                    if (has) {
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
