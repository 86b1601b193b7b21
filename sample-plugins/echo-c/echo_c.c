/*
 * echo_c: the minimal C sample plugin, and the template to copy.
 *
 * It owns `echo_c {}` blocks. At validate it refuses a `greeting` that is
 * not a string, fills in the default `greeting = "hello"` when the block has
 * none, logs one line through the host, and returns the normalised spec:
 * every other attribute as written. publish, drain and forget are left
 * NULL, which the ABI defines as "not supported" (no-op, always drained).
 *
 * It reads and writes JSON with cJSON (Debian: libcjson-dev), through the
 * samples' helpers in ../c-common/plugin_util.h, which also refuse what
 * cJSON would change on the way through: a string holding \u0000, and a
 * number cJSON cannot write back exactly.
 *
 * Ownership, as in include/voodu_plugin.h: the request is the host's, valid
 * for the call only; every reply is a cJSON_PrintUnformatted() buffer that
 * the host hands back, once, to echo_free.
 *
 * Build: cc -std=c99 -fPIC -shared -fvisibility=hidden -I include \
 *          -o libvoodu_echo_c.so echo_c.c ../c-common/plugin_util.c -lcjson
 */
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "voodu_plugin.h"
#include "../c-common/plugin_util.h"

/* The instance: the host's callbacks, kept from init until shutdown. The
 * host owns the table; the instance only points at it. */
typedef struct EchoInstance {
  const VooduHostApi *host;
} EchoInstance;

/* init: allocates the instance, which echo_shutdown frees. On failure the
 * reply in `out` is the host's until it comes back to echo_free. */
static VooduStatus echo_init(const VooduHostApi *host, void **out_instance, VooduBuffer *out) {
  EchoInstance *self = (EchoInstance *)malloc(sizeof *self);
  if (!self) return plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
  self->host = host;
  *out_instance = self;
  return VOODU_STATUS_OK;
}

/* Checks the spec of `block` (borrowed) and fills in its default, in place.
 * Returns VOODU_STATUS_OK, or REFUSED or ERROR with the message in `why`
 * (at most `why_cap` bytes) and, for a refusal of one option, the option
 * as a JSON pointer in `*pointer` (a static string). */
static VooduStatus normalise(cJSON *block, char *why, size_t why_cap, const char **pointer) {
  /* Case-sensitive lookups: cJSON_GetObjectItem ignores case. Both accept
   * NULL and a value that is not an object, and then answer NULL. */
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(block, "spec");
  cJSON *greeting = cJSON_GetObjectItemCaseSensitive(spec, "greeting");
  if (!spec) {
    snprintf(why, why_cap, "malformed validate request: no block.spec");
    return VOODU_STATUS_ERROR;
  }
  if (!cJSON_IsObject(spec)) {
    snprintf(why, why_cap, "the echo_c block must be a block body, not a value");
    return VOODU_STATUS_REFUSED;
  }
  if (greeting && !cJSON_IsString(greeting)) {
    char *shown = cJSON_PrintUnformatted(greeting); /* ours: cJSON_free it */
    snprintf(why, why_cap, "greeting must be a string%s%s", shown ? ", not " : "", shown ? shown : "");
    cJSON_free(shown);
    *pointer = "/greeting";
    return VOODU_STATUS_REFUSED;
  }
  /* Other attributes go back as written: refuse what cJSON would change. */
  if (!plugin_check_numbers(spec, why, why_cap)) return VOODU_STATUS_REFUSED;
  if (!greeting && !cJSON_AddStringToObject(spec, "greeting", "hello")) {
    snprintf(why, why_cap, "out of memory");
    return VOODU_STATUS_ERROR;
  }
  return VOODU_STATUS_OK;
}

/* Builds `{"spec": spec, "endpoints": {}}` (empty endpoints: the workload's
 * first port, ip addressing). Takes ownership of `spec`. Returns the reply,
 * which the caller owns, or NULL when out of memory (`spec` is then freed). */
static cJSON *validate_reply(cJSON *spec) {
  cJSON *reply = cJSON_CreateObject();
  if (!reply || !cJSON_AddItemToObject(reply, "spec", spec)) {
    cJSON_Delete(reply);
    cJSON_Delete(spec);
    return NULL;
  }
  if (!cJSON_AddObjectToObject(reply, "endpoints")) {
    cJSON_Delete(reply);
    return NULL;
  }
  return reply;
}

/* validate: reads `request` (borrowed, `request_len` bytes, not
 * NUL-terminated) and writes the normalised spec into `out`, or
 * `{"message": ...}` with REFUSED or ERROR. The parsed tree is the plugin's
 * and is freed before returning; the spec moves out of it into the reply. */
static VooduStatus echo_validate(void *instance, const uint8_t *request, size_t request_len,
                                 VooduBuffer *out) {
  const EchoInstance *self = (const EchoInstance *)instance;
  char why[256];
  const char *pointer = NULL;
  VooduStatus status;
  cJSON *root, *block, *reply;

  root = plugin_parse_request(request, request_len, "validate", &status, why, sizeof why);
  if (!root) return plugin_fail(out, status, why);
  block = cJSON_GetObjectItemCaseSensitive(root, "block");
  status = normalise(block, why, sizeof why, &pointer);
  if (status == VOODU_STATUS_OK) {
    reply = validate_reply(cJSON_DetachItemFromObjectCaseSensitive(block, "spec"));
    status = reply ? plugin_reply(out, VOODU_STATUS_OK, reply)
                   : plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
  } else {
    status = plugin_refuse_at(out, status, pointer, why);
  }
  cJSON_Delete(root);
  if (status == VOODU_STATUS_OK && self) {
    plugin_log(self->host, VOODU_LOG_INFO, "validated an echo_c block");
    /* Its own metric, voodu_plugin_echo_c_validations_total on a 1.2
     * host's /metrics; nothing on an older host. */
    plugin_metric(self->host, "validations_total", VOODU_METRIC_COUNTER, 1.0);
  }
  return status;
}

/* The block's options, as the JSON Schema `vd explain echo_c` shows. */
static const char ECHO_SCHEMA[] =
    "{\"type\":\"object\","
    "\"description\":\"Echoes its block back, normalised: the minimal C sample.\","
    "\"properties\":{\"greeting\":{\"type\":\"string\",\"default\":\"hello\","
    "\"description\":\"A greeting, kept in the normalised spec.\"}},"
    "\"additionalProperties\":true}";

/* describe (ABI 1.2): the schema above. */
static VooduStatus echo_describe(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  cJSON *schema = cJSON_Parse(ECHO_SCHEMA);
  (void)instance;
  (void)request;
  (void)request_len;
  return schema ? plugin_reply(out, VOODU_STATUS_OK, schema) : plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
}

/* free: releases a reply this plugin wrote. All come from
 * cJSON_PrintUnformatted (through plugin_reply and plugin_fail), so
 * cJSON_free releases them. */
static void echo_free(void *instance, VooduBuffer buffer) {
  (void)instance;
  cJSON_free(buffer.ptr);
}

/* shutdown: frees the instance echo_init allocated. */
static void echo_shutdown(void *instance) { free(instance); }

/* The vtable: static storage, unchanged while the library is loaded. */
/* Designated initializers: a member left out is NULL, "not supported" —
 * here publish, drain (always drained), forget, get_extension, and every
 * member a later ABI adds, so a newer header builds this file unchanged. */
static const VooduPluginV1 ECHO_C_VTABLE = {
    .abi_version = VOODU_ABI_VERSION,
    .struct_size = (uint32_t)sizeof(VooduPluginV1),
    .name = "echo_c",
    .version = "1.0.0",
    .init = echo_init,
    .validate = echo_validate,
    .free = echo_free,
    .shutdown = echo_shutdown,
    .describe = echo_describe,
};

VOODU_PLUGIN_EXPORT const VooduPluginV1 *voodu_plugin_entry_v1(void) { return &ECHO_C_VTABLE; }
