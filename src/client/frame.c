#include "client/frame.h"

#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void kjit__frame_encode(uint8_t out[KJIT_FRAME_HEADER], uint32_t json_len, uint32_t payload_len)
{
    memcpy(out, "KJIT", 4);
    put16(out + 4, KJIT_PROTO_VERSION);
    put16(out + 6, 0);
    put32(out + 8, json_len);
    put32(out + 12, payload_len);
}

int kjit__frame_decode(const uint8_t in[KJIT_FRAME_HEADER], uint32_t max_json, uint32_t max_payload,
                       kjit_frame_header *out, char *why, size_t why_len)
{
    if (memcmp(in, "KJIT", 4) != 0) {
        snprintf(why, why_len, "bad frame magic %02x %02x %02x %02x (expected \"KJIT\")", in[0], in[1],
                 in[2], in[3]);
        return -1;
    }
    out->version = get16(in + 4);
    out->flags = get16(in + 6);
    out->json_len = get32(in + 8);
    out->payload_len = get32(in + 12);
    if (out->version != KJIT_PROTO_VERSION) {
        snprintf(why, why_len, "frame version %u is not supported (this side speaks %d)", out->version,
                 KJIT_PROTO_VERSION);
        return -1;
    }
    if (out->flags) {
        snprintf(why, why_len, "frame flags 0x%x: no flags are defined, they must be 0", out->flags);
        return -1;
    }
    if (out->json_len < 2 || out->json_len > max_json) {
        snprintf(why, why_len, "frame JSON length %u outside 2..%u", out->json_len, max_json);
        return -1;
    }
    if (out->payload_len > max_payload) {
        snprintf(why, why_len, "frame payload length %u over the limit of %u", out->payload_len, max_payload);
        return -1;
    }
    return 0;
}

int kjit__json_depth(const char *json, size_t len, int limit)
{
    int depth = 0, deepest = 0, in_string = 0;
    for (size_t i = 0; i < len; ++i) {
        char ch = json[i];
        if (in_string) {
            if (ch == '\\') ++i;
            else if (ch == '"') in_string = 0;
        } else if (ch == '"') {
            in_string = 1;
        } else if (ch == '{' || ch == '[') {
            if (++depth > deepest && (deepest = depth) > limit) return deepest;
        } else if ((ch == '}' || ch == ']') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

/* Length of the UTF-8 sequence at p (n bytes left), 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t n)
{
    const unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (n < k || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; ++i)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return k;
}

/* Length of the JSON number (RFC 8259: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?)
 * at p (n bytes left, p[0] a '-' or a digit), 0 when it is not one: a
 * leading zero ("05"), "1.", "1e" (cJSON's strtod takes all three). */
static size_t json_number(const unsigned char *p, size_t n)
{
#define DIGIT(k) ((k) < n && p[k] >= '0' && p[k] <= '9')
    size_t j = p[0] == '-';
    if (j < n && p[j] == '0') j++;
    else if (DIGIT(j)) while (DIGIT(j)) j++;
    else return 0;
    if (j < n && p[j] == '.') {
        if (!DIGIT(j + 1)) return 0;
        for (j++; DIGIT(j);) j++;
    }
    if (j < n && (p[j] == 'e' || p[j] == 'E')) {
        j += j + 1 < n && (p[j + 1] == '+' || p[j + 1] == '-') ? 2 : 1;
        if (!DIGIT(j)) return 0;
        while (DIGIT(j)) j++;
    }
    /* "05": a number followed by what could only continue it. */
    if (DIGIT(j) || (j < n && (p[j] == '.' || p[j] == 'e' || p[j] == 'E' || p[j] == '+' || p[j] == '-'))) return 0;
    return j;
#undef DIGIT
}

const char *kjit__json_text_problem(const char *json, size_t len, size_t *at)
{
    const unsigned char *p = (const unsigned char *)json;
    int in_string = 0;
    for (size_t i = 0; i < len;) {
        const unsigned c = p[i];
        if (in_string && c == '\\' && i + 1 < len) {
            if (p[i + 1] == 'u' && i + 6 <= len && !memcmp(p + i + 2, "0000", 4)) {
                *at = i;
                return "escapes a NUL (\\u0000)";
            }
            i += 2; /* the escaped character: an escaped backslash escapes nothing after it */
            continue;
        }
        if (c == '"') {
            in_string = !in_string;
            i++;
            continue;
        }
        if (in_string && c < 0x20) {
            *at = i;
            return "has a control byte not escaped in a string";
        }
        if (!in_string) {
            /* cJSON skips any byte up to 0x20 as whitespace, and reads
             * numbers with strtod: JSON has four whitespace bytes and one
             * number syntax. */
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
                i++;
                continue;
            }
            if (c < 0x20 || c == 0x7f) {
                *at = i;
                return "has a control byte outside a string";
            }
            if (c >= 0x80) {
                *at = i;
                return i == 0 && len >= 3 && !memcmp(p, "\xef\xbb\xbf", 3) ? "starts with a byte-order mark"
                                                                        : "has a non-ASCII byte outside a string";
            }
            if (c == '-' || (c >= '0' && c <= '9')) {
                const size_t k = json_number(p + i, len - i);
                if (!k) {
                    *at = i;
                    return "has a number JSON does not allow (a leading zero, no digit after '.' or 'e')";
                }
                i += k;
                continue;
            }
            i++;
            continue;
        }
        const size_t k = utf8_seq(p + i, len - i);
        if (!k) {
            *at = i;
            return "is not UTF-8";
        }
        i += k;
    }
    return NULL;
}

cJSON *kjit__json_parse(const char *json, size_t len, const char **end)
{
    const char *e = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(json, len, &e, 0);
    if (!o) o = cJSON_ParseWithLengthOpts(json, len, &e, 0);
    if (end) *end = e;
    return o;
}
