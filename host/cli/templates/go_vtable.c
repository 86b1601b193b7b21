/*
 * {{name}}'s plugin table, in C: Go cannot export a C struct, so each
 * member here calls one //export function of {{name}}.go. Built by
 * `go build -buildmode=c-shared` with the Go file (see the Makefile).
 *
 * Designated initializers: a member left out is NULL, "not supported",
 * and a newer header, with members appended, builds this file unchanged.
 */
#include <stdlib.h>

#include "voodu_plugin.h"
#include "_cgo_export.h"

void voodu_go_log(const VooduHostApi *host, VooduLogLevel level, const char *line, size_t len) {
  if (host && host->log) host->log(host->host_ctx, level, (const uint8_t *)line, len);
}

static VooduStatus plugin_init(const VooduHostApi *host, void **out_instance, VooduBuffer *out) {
  (void)out;
  goInit((VooduHostApi *)host);
  /* The instance is the Go package's state; the pointer only says "made". */
  *out_instance = (void *)host;
  return VOODU_STATUS_OK;
}

static VooduStatus plugin_validate(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  (void)instance;
  return goValidate((uint8_t *)request, len, out);
}

static VooduStatus plugin_publish(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  (void)instance;
  return goPublish((uint8_t *)request, len, out);
}

static VooduStatus plugin_drain(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  (void)instance;
  return goDrain((uint8_t *)request, len, out);
}

static VooduStatus plugin_forget(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  (void)instance;
  return goForget((uint8_t *)request, len, out);
}

static VooduStatus plugin_describe(void *instance, const uint8_t *request, size_t len, VooduBuffer *out) {
  (void)instance;
  (void)request;
  (void)len;
  return goDescribe(out);
}

/* Every reply is C.CBytes memory: C's malloc. */
static void plugin_free(void *instance, VooduBuffer buffer) {
  (void)instance;
  free(buffer.ptr);
}

static void plugin_shutdown(void *instance) {
  (void)instance;
  goShutdown();
}

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
