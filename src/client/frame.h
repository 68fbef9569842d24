/* The wire frame of the kjit socket protocol (docs/PROTOCOL.md), shared by
 * the server, the C client and the load generator.
 *
 *   offset 0  4 bytes  magic "KJIT"
 *          4  u16 LE   protocol version (KJIT_PROTO_VERSION)
 *          6  u16 LE   flags, 0 (reserved: a frame with any bit set is refused)
 *          8  u32 LE   JSON header length, >= 2
 *         12  u32 LE   binary payload length, may be 0
 *         16  JSON header (UTF-8, no NUL), then the payload
 */
#ifndef KJIT_FRAME_H
#define KJIT_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define KJIT_PROTO_VERSION 1
#define KJIT_FRAME_HEADER 16

/* What the server accepts from a client; replies may be larger. */
#define KJIT_MAX_REQUEST_JSON (64u * 1024u)
#define KJIT_MAX_REQUEST_PAYLOAD (4u * 1024u)
#define KJIT_MAX_JSON_DEPTH 8

/* What the client accepts from a server. */
#define KJIT_MAX_REPLY_JSON (16u * 1024u * 1024u)
#define KJIT_MAX_REPLY_PAYLOAD (1024u * 1024u * 1024u)

typedef struct kjit_frame_header {
    uint16_t version;
    uint16_t flags;
    uint32_t json_len;
    uint32_t payload_len;
} kjit_frame_header;

void kjit__frame_encode(uint8_t out[KJIT_FRAME_HEADER], uint32_t json_len, uint32_t payload_len);

/* Decodes and checks a header against the limits. Returns 0, or -1 with a
 * message naming the field and the limit in why[]. */
int kjit__frame_decode(const uint8_t in[KJIT_FRAME_HEADER], uint32_t max_json, uint32_t max_payload,
                       kjit_frame_header *out, char *why, size_t why_len);

/* Nesting depth of a JSON text (brackets outside strings), counted without
 * parsing, so a hostile text is refused before cJSON recurses into it.
 * Returns the deepest level reached, stopping once it exceeds `limit`. */
int kjit__json_depth(const char *json, size_t len, int limit);

/* What a JSON header must not hold before it is parsed: bytes that are not
 * UTF-8 (RFC 3629: no overlong forms, surrogates or code points past
 * U+10FFFF) and the escape \u0000 (a decoded string would end there, and
 * the checks of what follows it with it); and what cJSON takes although
 * RFC 8259 does not: control bytes unescaped in a string or outside one
 * but for its four whitespace bytes, a byte-order mark or any non-ASCII
 * byte outside a string, numbers strtod reads but JSON's grammar refuses
 * ("05", "1.", "1e"). Returns NULL when the text is clean, else the
 * reason, with *at the byte offset of the problem. */
const char *kjit__json_text_problem(const char *json, size_t len, size_t *at);

/* cJSON_ParseWithLengthOpts (no NUL required), parsed a second time when
 * the first answers NULL: cJSON answers NULL for text that is not JSON and
 * for an allocation that failed alike, and a passing shortage of memory
 * must not be reported as the sender's bad JSON (text that is not JSON
 * fails again). *end as cJSON sets it; NULL for no interest. */
struct cJSON;
struct cJSON *kjit__json_parse(const char *json, size_t len, const char **end);

#endif
