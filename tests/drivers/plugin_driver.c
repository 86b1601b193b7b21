/*
 * plugin_driver: loads a C plugin with dlopen and drives every member once,
 * as the host would, then unloads it. Run under valgrind by the tests to
 * prove the plugin frees everything it allocates.
 *
 *   plugin_driver PLUGIN.so CONFIG_PATH
 *
 * The requests are those of a `haproxy` block; CONFIG_PATH is where its
 * configuration is rendered. Exits non-zero if a member answers unexpectedly.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "voodu_plugin.h"

static void quiet_log(void *context, VooduLogLevel level, const uint8_t *message, size_t len) {
  (void)context;
  (void)level;
  (void)message;
  (void)len;
}

static int call(const VooduPluginV1 *plugin, void *instance, VooduCallFn member, const char *name,
                const char *request, VooduStatus expected) {
  VooduBuffer out = {NULL, 0};
  VooduStatus status = member(instance, (const uint8_t *)request, strlen(request), &out);
  if (out.ptr) plugin->free(instance, out);
  if (status != expected) {
    fprintf(stderr, "%s answered %d, expected %d\n", name, (int)status, (int)expected);
    return 0;
  }
  return 1;
}

int main(int argc, char **argv) {
  VooduHostApi host;
  VooduPluginV1 const *(*entry)(void);
  const VooduPluginV1 *plugin;
  void *library, *instance = NULL;
  VooduBuffer out = {NULL, 0};
  char block[512], publish[1024], drain[1024], forget[768], validate[768];
  int ok = 1;

  if (argc != 3) {
    fprintf(stderr, "usage: plugin_driver PLUGIN.so CONFIG_PATH\n");
    return 2;
  }
  library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  *(void **)&entry = dlsym(library, "voodu_plugin_entry_v1");
  if (!entry) return 2;
  plugin = entry();
  /* Every member this driver does not serve (listen, unlisten, metric)
   * NULL, as the header asks of a host that lacks a service. */
  memset(&host, 0, sizeof host);
  host.abi_version = VOODU_ABI_VERSION;
  host.struct_size = (uint32_t)sizeof host;
  host.host_ctx = NULL;
  host.log = quiet_log;
  if (plugin->init(&host, &instance, &out) != VOODU_STATUS_OK) return 3;
  if (out.ptr) plugin->free(instance, out);

  snprintf(block, sizeof block,
           "{\"type\":\"haproxy\",\"labels\":[\"http\"],\"spec\":{\"port\":8084,\"config_path\":\"%s\","
           "\"frontend\":\"127.0.0.1:18084\",\"mode\":\"tcp\"}}",
           argv[2]);
  snprintf(validate, sizeof validate,
           "{\"kind\":\"deployment\",\"scope\":\"prod\",\"name\":\"esl\",\"block\":%s,\"workload\":{\"replicas\":2}}", block);
  snprintf(publish, sizeof publish,
           "{\"kind\":\"deployment\",\"scope\":\"prod\",\"name\":\"esl\",\"block\":%s,\"generation\":3,"
           "\"endpoints\":[{\"replica_id\":\"a1\",\"address\":\"127.0.0.1:9001\"},"
           "{\"replica_id\":\"b2\",\"address\":\"127.0.0.1:9002\"}]}",
           block);
  snprintf(drain, sizeof drain,
           "{\"kind\":\"deployment\",\"scope\":\"prod\",\"name\":\"esl\",\"block\":%s,"
           "\"replica\":{\"replica_id\":\"a1\",\"address\":\"127.0.0.1:9001\"},\"budget_ms\":1000,\"elapsed_ms\":0}",
           block);
  snprintf(forget, sizeof forget, "{\"kind\":\"deployment\",\"scope\":\"prod\",\"name\":\"esl\",\"block\":%s}", block);

  ok &= call(plugin, instance, plugin->validate, "validate", validate, VOODU_STATUS_OK);
  ok &= call(plugin, instance, plugin->validate, "validate (refused)",
             "{\"kind\":\"deployment\",\"scope\":\"p\",\"name\":\"e\",\"block\":{\"type\":\"haproxy\",\"spec\":{\"port\":1,\"bogus\":1}},\"workload\":{}}",
             VOODU_STATUS_REFUSED);
  ok &= call(plugin, instance, plugin->validate, "validate (malformed)", "{\"block\":", VOODU_STATUS_ERROR);
  ok &= call(plugin, instance, plugin->publish, "publish", publish, VOODU_STATUS_OK);
  ok &= call(plugin, instance, plugin->publish, "publish (malformed)", "[1,2", VOODU_STATUS_ERROR);
  ok &= call(plugin, instance, plugin->drain, "drain", drain, VOODU_STATUS_OK);
  ok &= call(plugin, instance, plugin->forget, "forget", forget, VOODU_STATUS_OK);
  plugin->shutdown(instance);
  dlclose(library);
  return ok ? 0 : 1;
}
