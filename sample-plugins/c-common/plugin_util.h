/*
 * Helpers shared by the C sample plugins (echo_c and haproxy), on top of
 * cJSON (Debian: libcjson-dev; include <cjson/cJSON.h>, link -lcjson):
 * logging through the host, reading a request exactly, and writing replies.
 * A plugin of your own can copy this file and plugin_util.c beside it.
 *
 * Ownership follows include/voodu_plugin.h: what the host passes in is
 * borrowed for the call. Every reply these helpers write into `out` is a
 * cJSON_PrintUnformatted() buffer, which the host hands back once to the
 * plugin's `free` member: release it there with cJSON_free(buffer.ptr).
 *
 * Two things cJSON does not do, which these helpers add:
 * - cJSON strings end at the first NUL, so a string holding \u0000 would be
 *   cut short: plugin_parse_request refuses such a request, naming the field.
 * - cJSON holds every number as a double and writes 15 to 17 significant
 *   digits, so some numbers would come back changed: plugin_check_numbers
 *   finds them, for a plugin that hands values back (as echo_c does).
 *
 * Every `why` buffer is the caller's, `why_cap` bytes, and receives one
 * NUL-terminated line.
 */
#ifndef VOODU_SAMPLE_PLUGIN_UTIL_H
#define VOODU_SAMPLE_PLUGIN_UTIL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "voodu_plugin.h"

/* Logs one NUL-terminated line through the host, if the host's table has a
 * log member. `host` may be NULL (nothing is logged); both are borrowed. */
void plugin_log(const VooduHostApi *host, VooduLogLevel level, const char *message);

/* Reports the plugin's own metric `name` (a NUL-terminated string the host
 * only borrows for the call) to a 1.2 host: VOODU_METRIC_COUNTER adds
 * `value`, VOODU_METRIC_GAUGE sets it. 1 when the host took it; 0 on an
 * older host (whose table has no `metric`) or when it refused the report
 * (it logs why). */
int plugin_metric(const VooduHostApi *host, const char *name, uint32_t kind, double value);

/* Asks a 1.3 host how many established TCP connections to `address`
 * (`IP:port`, NUL-terminated, borrowed) are held by process `pid` and its
 * descendants (0: the controller's own process). 1 with the count in
 * *count; 0 with the reason in `error` (`error_cap` bytes) on an older
 * host, or when the host refused or could not count. */
int plugin_connections(const VooduHostApi *host, const char *address, int32_t pid, uint64_t *count, char *error,
                       size_t error_cap);

/* Parses a request: `len` bytes of JSON, not NUL-terminated, borrowed from
 * the host. `call` ("validate", "publish", ...) names the call in messages.
 *
 * Returns the parsed tree, which the caller owns and frees with
 * cJSON_Delete. Returns NULL, with the status to answer in `*status` and
 * the message in `why`, when the request is not exactly one JSON value:
 * - VOODU_STATUS_ERROR, "malformed <call> request: ...": not JSON, cut
 *   short, followed by anything but whitespace, or holding a raw control
 *   character or bytes that are not UTF-8;
 * - VOODU_STATUS_REFUSED when a string (or key) inside block.spec holds
 *   \u0000, naming it by its place in the spec, as in "nested.list[2] holds
 *   a NUL character ..." (VOODU_STATUS_ERROR when it is elsewhere). */
cJSON *plugin_parse_request(const uint8_t *request, size_t len, const char *call, VooduStatus *status,
                            char *why, size_t why_cap);

/* Checks that cJSON writes every number in `value` (borrowed) back exactly
 * as it was read: within ±10^15, and read back by strtod as the same
 * double. Returns 1 if so; otherwise 0, with a refusal naming the first
 * other number by its place in `value` ("list[1].x ...") in `why`. */
int plugin_check_numbers(const cJSON *value, char *why, size_t why_cap);

/* Writes `reply` into `out` as the call's reply and returns `status`. Takes
 * ownership of `reply` (NULL is allowed) and frees it. If the reply cannot
 * be printed (out of memory), `out` stays empty and the call answers
 * VOODU_STATUS_ERROR. */
VooduStatus plugin_reply(VooduBuffer *out, VooduStatus status, cJSON *reply);

/* Replies `{"message": message}` and returns `status` (VOODU_STATUS_ERROR
 * with `out` empty when out of memory). `message` is a borrowed
 * NUL-terminated string; cJSON escapes it, and bytes that are not UTF-8 (a
 * message cut inside a character) become '?'. */
VooduStatus plugin_fail(VooduBuffer *out, VooduStatus status, const char *message);

/* plugin_fail, naming the option at fault when `pointer` (borrowed, may be
 * NULL) is given: `{"message": message, "pointer": pointer}`, the option as
 * a JSON pointer into the block's spec ("/greeting"), so the operator is
 * shown that attribute's own line. */
VooduStatus plugin_refuse_at(VooduBuffer *out, VooduStatus status, const char *pointer,
                             const char *message);

#endif
