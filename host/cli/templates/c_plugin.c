/*
 * {{name}}: a voodu plugin in C, made by `vd plugins:new`.
 *
 * It owns `{{name}} "LABEL" { ... }` blocks, with one option, `greeting`:
 * a string of 1 to 64 bytes, "hello" when the block gives none. Change
 * normalise() to take your own options; keep refusals in voodu's style
 * (what is wrong, then how to write it).
 *
 * JSON goes through cJSON (Debian: libcjson-dev). cJSON keeps numbers as
 * doubles: an integer above 2^53 does not come back exactly, so this
 * plugin refuses one rather than store a changed value.
 *
 * Ownership (voodu_plugin.h): a request is the host's, for the call only;
 * every reply is a cJSON_PrintUnformatted() buffer the host hands back,
 * once, to plugin_free.
 *
 * Build: make   (see the Makefile: the header's path, -lcjson, -Wl,-z,defs)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "voodu_plugin.h"

/* The greeting filled in when a block gives none. */
#define DEFAULT_GREETING "hello"
/* The longest greeting taken, in bytes. */
#define MAX_GREETING_BYTES 64

/* The instance: the host's callbacks, kept from init until shutdown. */
typedef struct Instance {
  const VooduHostApi *host;
} Instance;

/* Writes one line to the controller's log. */
static void say(const Instance *self, VooduLogLevel level, const char *text) {
  if (self && self->host && self->host->log) {
    self->host->log(self->host->host_ctx, level, (const uint8_t *)text, strlen(text));
  }
}

/* Hands `reply` (ours; freed here) to the host as the call's reply. */
static VooduStatus reply_with(VooduBuffer *out, VooduStatus status, cJSON *reply) {
  char *text = reply ? cJSON_PrintUnformatted(reply) : NULL;
  cJSON_Delete(reply);
  if (!text) return VOODU_STATUS_ERROR;
  out->ptr = (uint8_t *)text;
  out->len = strlen(text);
  return status;
}

/* A refusal or failure: `{"message": message}`, with `"pointer"` when
 * `pointer` is not NULL: the option at fault as a JSON pointer into the
 * block's spec ("/greeting"), so the operator is shown its own line. */
static VooduStatus refuse_at(VooduBuffer *out, VooduStatus status, const char *pointer,
                             const char *message) {
  cJSON *reply = cJSON_CreateObject();
  if (!reply || !cJSON_AddStringToObject(reply, "message", message) ||
      (pointer && !cJSON_AddStringToObject(reply, "pointer", pointer))) {
    cJSON_Delete(reply);
    return VOODU_STATUS_ERROR;
  }
  return reply_with(out, status, reply);
}

/* A refusal or failure about no one option: `{"message": message}`. */
static VooduStatus fail_with(VooduBuffer *out, VooduStatus status, const char *message) {
  return refuse_at(out, status, NULL, message);
}

/* Parses a request (the host's bytes, not NUL-terminated); NULL when it is
 * not a JSON object. */
static cJSON *parse(const uint8_t *request, size_t len) {
  cJSON *root = cJSON_ParseWithLength((const char *)request, len);
  if (root && !cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return NULL;
  }
  return root;
}

/* Whether every number in `value` comes back exactly through cJSON. */
static int numbers_survive(const cJSON *value) {
  const cJSON *item;
  if (cJSON_IsNumber(value)) {
    double number = value->valuedouble;
    return number > -9007199254740992.0 && number < 9007199254740992.0;
  }
  cJSON_ArrayForEach(item, value) {
    if (!numbers_survive(item)) return 0;
  }
  return 1;
}

static VooduStatus plugin_init(const VooduHostApi *host, void **out_instance, VooduBuffer *out) {
  /* Runs at every load: no side effects beyond the instance. */
  Instance *self = (Instance *)malloc(sizeof *self);
  if (!self) return fail_with(out, VOODU_STATUS_ERROR, "out of memory");
  self->host = host;
  *out_instance = self;
  return VOODU_STATUS_OK;
}

/* Checks `spec` (borrowed) and fills in its default, in place. Returns
 * VOODU_STATUS_OK, or REFUSED with the reason in `why` and, when one
 * option is at fault, its JSON pointer in `*pointer` (a static string). */
static VooduStatus normalise(cJSON *spec, char *why, size_t why_cap, const char **pointer) {
  cJSON *greeting;
  if (!cJSON_IsObject(spec)) {
    snprintf(why, why_cap, "a {{name}} block is a block body — write {{name}} \"http\" { greeting = \"hello\" }");
    return VOODU_STATUS_REFUSED;
  }
  if (!numbers_survive(spec)) {
    snprintf(why, why_cap, "a number in the block is too large to keep exactly (above 2^53) — write it as a string");
    return VOODU_STATUS_REFUSED;
  }
  greeting = cJSON_GetObjectItemCaseSensitive(spec, "greeting");
  if (!greeting) {
    return cJSON_AddStringToObject(spec, "greeting", DEFAULT_GREETING) ? VOODU_STATUS_OK : VOODU_STATUS_ERROR;
  }
  if (!cJSON_IsString(greeting) || greeting->valuestring[0] == '\0' ||
      strlen(greeting->valuestring) > MAX_GREETING_BYTES) {
    char *shown = cJSON_PrintUnformatted(greeting);
    snprintf(why, why_cap, "greeting must be a string of 1 to %d bytes, not %.80s — write greeting = \"hello\"",
             MAX_GREETING_BYTES, shown ? shown : "that");
    cJSON_free(shown);
    *pointer = "/greeting";
    return VOODU_STATUS_REFUSED;
  }
  return VOODU_STATUS_OK;
}

static VooduStatus plugin_validate(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  cJSON *root = parse(request, len);
  cJSON *block, *spec, *reply;
  char why[256];
  const char *pointer = NULL;
  VooduStatus status;
  (void)instance;
  if (!root) return fail_with(out, VOODU_STATUS_ERROR, "malformed validate request: not a JSON object");
  block = cJSON_GetObjectItemCaseSensitive(root, "block");
  spec = cJSON_DetachItemFromObjectCaseSensitive(block, "spec");
  cJSON_Delete(root);
  if (!spec) return fail_with(out, VOODU_STATUS_ERROR, "malformed validate request: no block.spec");
  status = normalise(spec, why, sizeof why, &pointer);
  if (status != VOODU_STATUS_OK) {
    cJSON_Delete(spec);
    return status == VOODU_STATUS_REFUSED ? refuse_at(out, status, pointer, why)
                                          : fail_with(out, status, "out of memory");
  }
  /* {"spec": ..., "endpoints": {}}: the workload's first port, by IP. */
  reply = cJSON_CreateObject();
  if (!reply || !cJSON_AddItemToObject(reply, "spec", spec)) {
    cJSON_Delete(reply);
    cJSON_Delete(spec);
    return fail_with(out, VOODU_STATUS_ERROR, "out of memory");
  }
  if (!cJSON_AddObjectToObject(reply, "endpoints")) {
    cJSON_Delete(reply);
    return fail_with(out, VOODU_STATUS_ERROR, "out of memory");
  }
  return reply_with(out, VOODU_STATUS_OK, reply);
}

static VooduStatus plugin_publish(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  cJSON *root = parse(request, len);
  char line[200];
  if (!root) return fail_with(out, VOODU_STATUS_ERROR, "malformed publish request: not a JSON object");
  snprintf(line, sizeof line, "generation %.0f: %d replica(s)",
           cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(root, "generation")),
           cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "endpoints")));
  cJSON_Delete(root);
  say((const Instance *)instance, VOODU_LOG_INFO, line);
  return VOODU_STATUS_OK;
}

static VooduStatus plugin_drain(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  cJSON *root = parse(request, len), *reply;
  (void)instance;
  if (!root) return fail_with(out, VOODU_STATUS_ERROR, "malformed drain request: not a JSON object");
  cJSON_Delete(root);
  /* Nothing held here: drained at once. Else {"state": "draining",
   * "retry_after_ms": 100} to be asked again. */
  reply = cJSON_CreateObject();
  if (!reply || !cJSON_AddStringToObject(reply, "state", "drained")) {
    cJSON_Delete(reply);
    return VOODU_STATUS_ERROR;
  }
  return reply_with(out, VOODU_STATUS_OK, reply);
}

static VooduStatus plugin_forget(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  cJSON *root = parse(request, len);
  if (!root) return fail_with(out, VOODU_STATUS_ERROR, "malformed forget request: not a JSON object");
  cJSON_Delete(root);
  /* Called again for a block already forgotten: never fail then. */
  say((const Instance *)instance, VOODU_LOG_INFO, "forgot a block");
  return VOODU_STATUS_OK;
}

/* The block's options as a JSON Schema: `vd explain {{name}}` shows them,
 * and an option the block gives that is not here is refused at apply with
 * the nearest name. */
static const char SCHEMA[] =
    "{\"type\":\"object\",\"description\":\"A {{name}} block, made by vd plugins:new.\","
    "\"properties\":{\"greeting\":{\"type\":\"string\",\"default\":\"" DEFAULT_GREETING "\","
    "\"description\":\"A greeting of 1 to 64 bytes.\"}},"
    "\"additionalProperties\":false}";

static VooduStatus plugin_describe(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  (void)instance;
  (void)request;
  (void)len;
  return reply_with(out, VOODU_STATUS_OK, cJSON_Parse(SCHEMA));
}

static void plugin_free(void *instance, VooduBuffer buffer) {
  (void)instance;
  cJSON_free(buffer.ptr);
}

static void plugin_shutdown(void *instance) { free(instance); }

/* Designated initializers: a member left out is NULL, "not supported"
 * (get_extension; describe_settings and configure, ABI 1.3), and a newer
 * header, with members appended, builds this file unchanged and without a
 * -Wmissing-field-initializers warning. */
static const VooduPluginV1 PLUGIN = {
    .abi_version = VOODU_ABI_VERSION,
    .struct_size = (uint32_t)sizeof(VooduPluginV1),
    .name = "{{name}}",
    .version = "0.1.0",
    .init = plugin_init,
    .validate = plugin_validate,
    .publish = plugin_publish,
    .drain = plugin_drain,
    .forget = plugin_forget,
    .free = plugin_free,
    .shutdown = plugin_shutdown,
    .describe = plugin_describe, /* ABI 1.2 */
};

VOODU_PLUGIN_EXPORT const VooduPluginV1 *voodu_plugin_entry_v1(void) { return &PLUGIN; }
