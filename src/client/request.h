/* The checks a request's JSON text passes before it is sent (what a server
 * would refuse as bad_json, refused with its reason by the client). */
#ifndef KJIT_CLIENT_REQUEST_H
#define KJIT_CLIENT_REQUEST_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* KJIT_OK with *out the parsed object (the caller deletes it; out may be
 * NULL) and *end where cJSON stopped (end may be NULL), or KJIT_EINVAL naming the problem: bytes that are not UTF-8 or
 * \u0000, nesting past KJIT_MAX_JSON_DEPTH, not a JSON object, text after
 * the object. */
int kjit__request_parse(const char *json, size_t len, cJSON **out, const char **end);

#endif
