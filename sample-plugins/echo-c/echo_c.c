/*
 * echo_c: the minimal C sample plugin, and the template to copy.
 *
 * It owns `echo_c {}` blocks. At validate it fills in the default
 * `greeting = "hello"` when the block has none, logs one line through the
 * host, and returns the normalised spec. publish, drain and forget are left
 * NULL, which the ABI defines as "not supported" (no-op, always drained).
 *
 * It depends on include/voodu_plugin.h, and on ../c-common/plugin_util.h,
 * the samples' own helpers (host logging and a tiny scanner that skips JSON
 * values). It finds the span of `block.spec` in the request with that
 * scanner, and writes the reply by hand.
 *
 * Build: cc -std=c99 -fPIC -shared -I include -o libvoodu_echo_c.so echo_c.c
 */
#include <stdlib.h>
#include <string.h>

#include "voodu_plugin.h"
#include "../c-common/plugin_util.h"

/* The host's callbacks, kept from init until shutdown. */
typedef struct EchoInstance {
  const VooduHostApi *host;
} EchoInstance;

static void host_log(const EchoInstance *self, VooduLogLevel level, const char *message) {
  if (self) plugin_log(self->host, level, message);
}

/* --- Finding a key ------------------------------------------------------- */

/* Positions the cursor on the value of `key` in the object it points at.
 * Returns 0 when the key is absent or the JSON is malformed. */
static int find_key(Cursor *c, const char *key) {
  size_t key_len = strlen(key);
  skip_space(c);
  if (c->at >= c->end || *c->at != '{') return 0;
  c->at++;
  for (;;) {
    const uint8_t *name;
    size_t name_len;
    skip_space(c);
    if (c->at >= c->end || *c->at == '}') return 0;
    name = c->at + 1;
    if (!skip_string(c)) return 0;
    name_len = (size_t)(c->at - name) - 1;
    skip_space(c);
    if (c->at >= c->end || *c->at != ':') return 0;
    c->at++;
    skip_space(c);
    if (c->at >= c->end) return 0;
    if (name_len == key_len && memcmp(name, key, key_len) == 0) return 1;
    if (!skip_value(c)) return 0;
    skip_space(c);
    if (c->at < c->end && *c->at == ',') c->at++;
  }
}

/* --- Replies --------------------------------------------------------------- */

static VooduStatus reply(VooduBuffer *out, VooduStatus status, const char *parts[], size_t count) {
  size_t total = 0, i;
  uint8_t *buffer;
  for (i = 0; i < count; i++) total += strlen(parts[i]);
  buffer = (uint8_t *)malloc(total ? total : 1);
  if (!buffer) return VOODU_STATUS_ERROR;
  total = 0;
  for (i = 0; i < count; i++) {
    size_t len = strlen(parts[i]);
    memcpy(buffer + total, parts[i], len);
    total += len;
  }
  out->ptr = buffer;
  out->len = total;
  return status;
}

static VooduStatus fail(VooduBuffer *out, VooduStatus status, const char *message) {
  const char *parts[] = {"{\"message\":\"", message, "\"}"};
  return reply(out, status, parts, 3);
}

/* --- The vtable members ---------------------------------------------------- */

static VooduStatus echo_init(const VooduHostApi *host, void **out_instance, VooduBuffer *out) {
  EchoInstance *self = (EchoInstance *)malloc(sizeof *self);
  if (!self) return fail(out, VOODU_STATUS_ERROR, "out of memory");
  self->host = host;
  *out_instance = self;
  return VOODU_STATUS_OK;
}

static VooduStatus echo_validate(void *instance, const uint8_t *request, size_t request_len,
                                 VooduBuffer *out) {
  Cursor c;
  Cursor probe;
  const uint8_t *spec_start;
  size_t spec_len;
  char *spec;
  VooduStatus status;
  int has_greeting, is_empty;

  c.at = request;
  c.end = request + request_len;
  if (!find_key(&c, "block") || !find_key(&c, "spec")) {
    return fail(out, VOODU_STATUS_ERROR, "malformed validate request: no block.spec");
  }
  spec_start = c.at;
  if (*spec_start != '{') {
    return fail(out, VOODU_STATUS_REFUSED, "the echo_c block must be a block body, not a value");
  }
  if (!skip_value(&c)) return fail(out, VOODU_STATUS_ERROR, "malformed validate request");
  spec_len = (size_t)(c.at - spec_start);

  probe.at = spec_start;
  probe.end = spec_start + spec_len;
  has_greeting = find_key(&probe, "greeting");
  probe.at = spec_start + 1;
  skip_space(&probe);
  is_empty = probe.at < probe.end && *probe.at == '}';

  spec = (char *)malloc(spec_len + 1);
  if (!spec) return fail(out, VOODU_STATUS_ERROR, "out of memory");
  memcpy(spec, spec_start, spec_len);
  spec[spec_len] = '\0';
  {
    /* {"spec":{"greeting":"hello",<rest>,"endpoints":{}} */
    const char *parts[] = {"{\"spec\":{",
                           has_greeting ? "" : (is_empty ? "\"greeting\":\"hello\"" : "\"greeting\":\"hello\","),
                           spec + 1, ",\"endpoints\":{}}"};
    status = reply(out, VOODU_STATUS_OK, parts, 4);
  }
  free(spec);
  host_log((const EchoInstance *)instance, VOODU_LOG_INFO, "validated an echo_c block");
  return status;
}

static void echo_free(void *instance, VooduBuffer buffer) {
  (void)instance;
  free(buffer.ptr);
}

static void echo_shutdown(void *instance) { free(instance); }

static const VooduPluginV1 ECHO_C_VTABLE = {
    VOODU_ABI_VERSION,
    (uint32_t)sizeof(VooduPluginV1),
    "echo_c",
    "1.0.0",
    echo_init,
    echo_validate,
    NULL, /* publish: not supported */
    NULL, /* drain: not supported, always drained */
    NULL, /* forget: not supported */
    echo_free,
    echo_shutdown,
    NULL, /* get_extension: no extensions */
};

VOODU_PLUGIN_EXPORT const VooduPluginV1 *voodu_plugin_entry_v1(void) { return &ECHO_C_VTABLE; }
