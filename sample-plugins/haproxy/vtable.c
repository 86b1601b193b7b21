/*
 * haproxy: the C sample plugin. It owns `haproxy {}` blocks and keeps an
 * HAProxy configuration in step with the block's replicas:
 *
 *   haproxy "http" {
 *     port           = 8084                       (the replicas' port; required)
 *     config_path    = "/etc/haproxy/esl.cfg"     (where the configuration goes; required)
 *     frontend       = "127.0.0.1:8084"           (default: 127.0.0.1:<port>)
 *     mode           = "tcp"                      ("tcp", the default, or "http")
 *     runtime_socket = "/run/haproxy/esl.sock"    (optional: drains through HAProxy's runtime API)
 *     master_socket  = "/run/haproxy/master.sock" (optional: reloads HAProxy after each publish)
 *     network        = "voodu0"                   (optional: HAProxy runs on voodu0, so address
 *                                                  replicas by container name)
 *     pid_file       = "/run/haproxy/esl.pid"     (optional: where HAProxy writes its pid; without a
 *                                                  runtime socket, drains wait on HAProxy's connections)
 *   }
 *
 * - validate checks the block and fills in the defaults (config.c).
 * - publish renders a complete configuration (global, defaults, one
 *   frontend, one backend, one server per replica named by its replica id),
 *   writes it atomically (a temporary file, then rename; render.c) and, with
 *   a master socket, asks HAProxy to reload (sockets.c).
 * - drain, with a runtime socket, sets the server to DRAIN and answers
 *   "drained" once its current sessions reach 0; without one but with a
 *   pid file, once HAProxy's processes (the master and its workers) hold
 *   no connection to the replica, as the host counts them (ABI 1.3's
 *   `connections`); with neither it answers "drained" at once. When
 *   HAProxy cannot be asked or counted, drain fails rather than guess.
 * - forget removes the configuration file.
 *
 * Plugin-wide settings (ABI 1.3, `vd plugins:settings haproxy FILE`):
 *
 *   {"config_dir": "/etc/haproxy/voodu"}   (optional: every block's config_path
 *                                            must lie inside it, so a manifest
 *                                            cannot make the plugin write
 *                                            anywhere else)
 *
 * This file holds the plugin's members and its entry point. It depends on
 * include/voodu_plugin.h, on cJSON (libcjson-dev) through the samples'
 * helpers in ../c-common/plugin_util.h, and on POSIX for files and unix
 * sockets. Every allocation is freed before the member returns, except
 * reply buffers, which the host hands back to haproxy_free.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "haproxy.h"

/* The instance: the host's callbacks, kept from init until shutdown, and
 * the plugin-wide settings (haproxy_configure). */
typedef struct Instance {
  const VooduHostApi *host;
  /* The directory every config_path must lie inside; NULL: anywhere. */
  char *config_dir;
} Instance;

static void host_log(const Instance *self, VooduLogLevel level, const char *message) {
  if (self) plugin_log(self->host, level, message);
}

/* A whole non-negative number under 10^18 in `value`, else 0. */
static unsigned long long whole_number(const cJSON *value) {
  double number = cJSON_IsNumber(value) ? value->valuedouble : -1;
  if (!(number >= 0 && number < 1e18) || number != (double)(unsigned long long)number) return 0;
  return (unsigned long long)number;
}

/* Whether `path` lies inside the instance's config_dir: below it, with no
 * `..` segment to climb out. Any path does when no config_dir is set. */
static int inside_config_dir(const Instance *self, const char *path) {
  size_t dir_len;
  if (!self->config_dir) return 1;
  dir_len = strlen(self->config_dir);
  while (dir_len > 1 && self->config_dir[dir_len - 1] == '/') dir_len--;
  if (strncmp(path, self->config_dir, dir_len) != 0 || path[dir_len] != '/') return 0;
  /* No `..` segment: neither inside nor at the end. */
  return strstr(path, "/../") == NULL && !(strlen(path) >= 3 && strcmp(path + strlen(path) - 3, "/..") == 0);
}

/* init: allocates the instance, which haproxy_shutdown frees. */
static VooduStatus haproxy_init(const VooduHostApi *host, void **out_instance, VooduBuffer *out) {
  Instance *self = (Instance *)malloc(sizeof *self);
  if (!self) return plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
  self->host = host;
  self->config_dir = NULL;
  *out_instance = self;
  return VOODU_STATUS_OK;
}

/* The address HAProxy's frontend binds, as the host's claims spell it
 * (`IP:port`), written into `out` (`cap` bytes); 0 when the frontend names
 * a host by name, which the host cannot compare, so nothing is claimed.
 * HAProxy's `*:8084` and `:8084` bind every address: `0.0.0.0:8084`. */
static int frontend_claim(const char *frontend, char *out, size_t cap) {
  const char *colon = strrchr(frontend, ':');
  char host[64];
  unsigned char ip[sizeof(struct in6_addr)];
  size_t host_len;
  int written;
  if (!colon || !colon[1]) return 0;
  host_len = (size_t)(colon - frontend);
  if (host_len == 0 || (host_len == 1 && frontend[0] == '*')) {
    written = snprintf(out, cap, "0.0.0.0:%s", colon + 1);
    return written > 0 && (size_t)written < cap;
  }
  if (host_len >= sizeof host) return 0;
  memcpy(host, frontend, host_len);
  host[host_len] = '\0';
  /* `[::1]:8084` as it is; an IPv4 literal as it is; a name: nothing. */
  if (host[0] == '[' && host[host_len - 1] == ']') {
    host[host_len - 1] = '\0';
    if (inet_pton(AF_INET6, host + 1, ip) != 1) return 0;
  } else if (inet_pton(AF_INET, host, ip) != 1) {
    return 0;
  }
  written = snprintf(out, cap, "%s", frontend);
  return written > 0 && (size_t)written < cap;
}

/* The validate reply for `spec` (borrowed): `{"spec": <normalised>,
 * "endpoints": {"port", "addressing"}, "claims": [{"kind": "listen",
 * "protocol": "tcp", "address": <frontend>}]}` (the frontend's address is
 * this block's alone: the host refuses another block that claims it),
 * owned by the caller, or NULL when out of memory. */
static cJSON *validate_reply(const Spec *spec) {
  cJSON *reply = cJSON_CreateObject();
  cJSON *normalised = spec_json(spec);
  cJSON *endpoints, *claims, *claim;
  char address[80];
  if (!reply || !normalised || !cJSON_AddItemToObject(reply, "spec", normalised)) {
    cJSON_Delete(reply);
    cJSON_Delete(normalised); /* not in `reply`, so freed on its own */
    return NULL;
  }
  endpoints = cJSON_AddObjectToObject(reply, "endpoints");
  if (!endpoints || !cJSON_AddNumberToObject(endpoints, "port", (double)spec->port) ||
      !cJSON_AddStringToObject(endpoints, "addressing", spec->network ? "dns" : "ip")) {
    cJSON_Delete(reply);
    return NULL;
  }
  if (frontend_claim(spec->frontend, address, sizeof address)) {
    claims = cJSON_AddArrayToObject(reply, "claims");
    claim = claims ? cJSON_CreateObject() : NULL;
    if (claim && !cJSON_AddItemToArray(claims, claim)) {
      cJSON_Delete(claim); /* not in `reply`, so freed on its own */
      claim = NULL;
    }
    /* From here `claim` belongs to `reply`. */
    if (!claim || !cJSON_AddStringToObject(claim, "kind", "listen") ||
        !cJSON_AddStringToObject(claim, "protocol", "tcp") ||
        !cJSON_AddStringToObject(claim, "address", address)) {
      cJSON_Delete(reply);
      return NULL;
    }
  }
  return reply;
}

/* validate: checks the block and replies with validate_reply. */
static VooduStatus haproxy_validate(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  const cJSON *body;
  cJSON *root, *reply;
  Spec spec;
  char error[256];
  const char *option = NULL;
  VooduStatus status;
  int valid;
  (void)instance;
  root = plugin_parse_request(request, request_len, "validate", &status, error, sizeof error);
  if (!root) return plugin_fail(out, status, error);
  body = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "block"), "spec");
  if (!body) {
    cJSON_Delete(root);
    return plugin_fail(out, VOODU_STATUS_ERROR, "malformed validate request: no block.spec");
  }
  valid = validate_spec(body, &spec, error, sizeof error, &option);
  cJSON_Delete(root);
  if (valid && instance && !inside_config_dir((const Instance *)instance, spec.config_path)) {
    snprintf(error, sizeof error,
             "config_path %.60s is outside config_dir %.60s (the haproxy plugin's setting) — write a path under it",
             spec.config_path, ((const Instance *)instance)->config_dir);
    option = "config_path";
    spec_free(&spec);
    valid = 0;
  }
  if (!valid) {
    /* The option at fault as a JSON pointer: the operator sees its line. */
    char pointer[64];
    if (option) snprintf(pointer, sizeof pointer, "/%s", option);
    return plugin_refuse_at(out, VOODU_STATUS_REFUSED, option ? pointer : NULL, error);
  }
  reply = validate_reply(&spec);
  spec_free(&spec);
  return reply ? plugin_reply(out, VOODU_STATUS_OK, reply) : plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
}

/* publish: renders and writes the configuration, then reloads HAProxy. An
 * empty reply. */
static VooduStatus haproxy_publish(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  cJSON *root;
  Target t;
  Buf config = {NULL, 0, 0, 0};
  char error[256];
  VooduStatus status;
  int rendered;
  root = plugin_parse_request(request, request_len, "publish", &status, error, sizeof error);
  if (!root) return plugin_fail(out, status, error);
  if (!read_target(root, &t, error, sizeof error)) {
    cJSON_Delete(root);
    return plugin_fail(out, VOODU_STATUS_ERROR, error);
  }
  rendered = render_config(&t, whole_number(cJSON_GetObjectItemCaseSensitive(root, "generation")),
                           cJSON_GetObjectItemCaseSensitive(root, "endpoints"), &config);
  if (!rendered) {
    free(config.data);
    target_free(&t);
    cJSON_Delete(root);
    return plugin_fail(out, VOODU_STATUS_ERROR, "malformed publish request: no endpoints array");
  }
  if (config.failed) {
    free(config.data);
    target_free(&t);
    cJSON_Delete(root);
    return plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
  }
  /* Only the servers changed, and HAProxy has a runtime socket: change them
   * there, without a reload (a reload starts a new HAProxy worker, which
   * forgets what the runtime API set, such as a drain). */
  if (t.spec.runtime_socket) {
    Buf running = {NULL, 0, 0, 0};
    char why[256];
    int synced = read_file(t.spec.config_path, &running) && same_but_servers(running.data, config.data) &&
                 haproxy_sync_servers(t.spec.runtime_socket, t.section,
                                      cJSON_GetObjectItemCaseSensitive(root, "endpoints"), why, sizeof why);
    free(running.data);
    if (synced) {
      int written = write_atomically(t.spec.config_path, &config, error, sizeof error);
      free(config.data);
      target_free(&t);
      cJSON_Delete(root);
      if (!written) return plugin_fail(out, VOODU_STATUS_ERROR, error);
      host_log((const Instance *)instance, VOODU_LOG_INFO, "changed HAProxy's servers through its runtime socket");
      return VOODU_STATUS_OK;
    }
  }
  if (!write_atomically(t.spec.config_path, &config, error, sizeof error)) {
    free(config.data);
    target_free(&t);
    cJSON_Delete(root);
    return plugin_fail(out, VOODU_STATUS_ERROR, error);
  }
  free(config.data);
  cJSON_Delete(root);
  if (t.spec.master_socket) {
    int reloaded = haproxy_reload(t.spec.master_socket, error, sizeof error);
    if (reloaded == 0) {
      target_free(&t);
      return plugin_fail(out, VOODU_STATUS_ERROR, error);
    }
    if (reloaded < 0) {
      host_log((const Instance *)instance, VOODU_LOG_WARN,
               "HAProxy is not running yet; it reads the rendered configuration when it starts");
    }
  }
  host_log((const Instance *)instance, VOODU_LOG_INFO, "rendered the HAProxy configuration");
  target_free(&t);
  return VOODU_STATUS_OK;
}

/* drain: `{"state": "drained"}`, or `"draining"` with `retry_after_ms`. */
static VooduStatus haproxy_drain(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  cJSON *root, *reply;
  Target t;
  char error[256];
  const char *replica_id;
  long sessions = 0;
  VooduStatus status;
  int asked = 1;
  const Instance *self = (const Instance *)instance;
  const char *address;
  root = plugin_parse_request(request, request_len, "drain", &status, error, sizeof error);
  if (!root) return plugin_fail(out, status, error);
  if (!read_target(root, &t, error, sizeof error)) {
    cJSON_Delete(root);
    return plugin_fail(out, VOODU_STATUS_ERROR, error);
  }
  replica_id = string_member(cJSON_GetObjectItemCaseSensitive(root, "replica"), "replica_id");
  if (!replica_id) {
    cJSON_Delete(root);
    target_free(&t);
    return plugin_fail(out, VOODU_STATUS_ERROR, "malformed drain request: no replica.replica_id");
  }
  address = string_member(cJSON_GetObjectItemCaseSensitive(root, "replica"), "address");
  if (t.spec.runtime_socket) {
    asked = haproxy_drain_server(t.spec.runtime_socket, t.section, replica_id, &sessions, error, sizeof error);
  } else if (t.spec.pid_file) {
    if (!address) {
      cJSON_Delete(root);
      target_free(&t);
      return plugin_fail(out, VOODU_STATUS_ERROR, "malformed drain request: no replica.address");
    }
    asked = haproxy_held_connections(self ? self->host : NULL, t.spec.pid_file, address, &sessions, error,
                                     sizeof error);
  }
  cJSON_Delete(root);
  target_free(&t);
  if (!asked) return plugin_fail(out, VOODU_STATUS_ERROR, error);
  reply = cJSON_CreateObject();
  if (!reply || !cJSON_AddStringToObject(reply, "state", sessions > 0 ? "draining" : "drained") ||
      (sessions > 0 && !cJSON_AddNumberToObject(reply, "retry_after_ms", 100))) {
    cJSON_Delete(reply);
    return plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
  }
  return plugin_reply(out, VOODU_STATUS_OK, reply);
}

/* forget: removes the configuration file. An empty reply. */
static VooduStatus haproxy_forget(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  cJSON *root;
  Target t;
  char error[256];
  VooduStatus status;
  root = plugin_parse_request(request, request_len, "forget", &status, error, sizeof error);
  if (!root) return plugin_fail(out, status, error);
  if (!read_target(root, &t, error, sizeof error)) {
    cJSON_Delete(root);
    return plugin_fail(out, VOODU_STATUS_ERROR, error);
  }
  cJSON_Delete(root);
  if (remove(t.spec.config_path) != 0 && errno != ENOENT) {
    snprintf(error, sizeof error, "cannot remove %.120s: %s", t.spec.config_path, strerror(errno));
    target_free(&t);
    return plugin_fail(out, VOODU_STATUS_ERROR, error);
  }
  host_log((const Instance *)instance, VOODU_LOG_INFO, "removed the HAProxy configuration");
  target_free(&t);
  return VOODU_STATUS_OK;
}

/* The block's options, as the JSON Schema `vd explain haproxy` shows. */
static const char HAPROXY_SCHEMA[] =
    "{\"type\":\"object\","
    "\"description\":\"Drives a real HAProxy: writes its configuration, changes servers through its runtime API, reloads through its master socket.\","
    "\"properties\":{"
    "\"port\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":65535,\"description\":\"The replicas' container port.\"},"
    "\"config_path\":{\"type\":\"string\",\"description\":\"Where the plugin writes HAProxy's configuration.\"},"
    "\"frontend\":{\"type\":\"string\",\"description\":\"Where HAProxy listens, host:port (default 127.0.0.1:<port>).\"},"
    "\"mode\":{\"type\":\"string\",\"enum\":[\"tcp\",\"http\"],\"default\":\"tcp\",\"description\":\"HAProxy's mode.\"},"
    "\"runtime_socket\":{\"type\":\"string\",\"description\":\"HAProxy's runtime API socket: drains, and server changes without a reload.\"},"
    "\"pid_file\":{\"type\":\"string\",\"description\":\"Where HAProxy writes its pid (rendered as pidfile): without a runtime socket, a drain waits until HAProxy holds no connection to the replica.\"},"
    "\"master_socket\":{\"type\":\"string\",\"description\":\"HAProxy's master socket, to reload it when the runtime API cannot express a change.\"},"
    "\"network\":{\"type\":\"string\",\"enum\":[\"voodu0\"],\"description\":\"HAProxy runs on voodu0 and reaches replicas by name.\"}},"
    "\"required\":[\"port\",\"config_path\"],"
    "\"examples\":[{\"port\":8084,\"config_path\":\"/tmp/voodu-haproxy-example.cfg\"}],"
    "\"additionalProperties\":false}";

/* The plugin-wide settings, as the JSON Schema `vd explain haproxy` shows
 * under SETTINGS. */
static const char HAPROXY_SETTINGS_SCHEMA[] =
    "{\"type\":\"object\","
    "\"description\":\"Settings for every haproxy block on this host.\","
    "\"properties\":{"
    "\"config_dir\":{\"type\":\"string\",\"pattern\":\"^/\",\"description\":\"An absolute directory every block's config_path must lie inside, so a manifest cannot make the plugin write anywhere else (default: anywhere).\"}},"
    "\"additionalProperties\":false}";

/* describe_settings (ABI 1.3): the settings schema above. */
static VooduStatus haproxy_describe_settings(void *instance, const uint8_t *request, size_t request_len,
                                             VooduBuffer *out) {
  cJSON *schema = cJSON_Parse(HAPROXY_SETTINGS_SCHEMA);
  (void)instance;
  (void)request;
  (void)request_len;
  return schema ? plugin_reply(out, VOODU_STATUS_OK, schema) : plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
}

/* configure (ABI 1.3): takes `{"settings": {"config_dir"?}}`, already
 * checked against the schema by the host; checked again here, and taken
 * whole or not at all. An empty reply. */
static VooduStatus haproxy_configure(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  Instance *self = (Instance *)instance;
  cJSON *root, *settings;
  const cJSON *dir;
  char error[256];
  char *kept = NULL;
  VooduStatus status;
  root = plugin_parse_request(request, request_len, "configure", &status, error, sizeof error);
  if (!root) return plugin_fail(out, status, error);
  settings = cJSON_GetObjectItemCaseSensitive(root, "settings");
  dir = cJSON_GetObjectItemCaseSensitive(settings, "config_dir");
  if (dir) {
    if (!cJSON_IsString(dir) || dir->valuestring[0] != '/') {
      cJSON_Delete(root);
      return plugin_refuse_at(out, VOODU_STATUS_REFUSED, "/config_dir",
                              "config_dir must be an absolute directory, such as \"/etc/haproxy/voodu\"");
    }
    kept = (char *)malloc(strlen(dir->valuestring) + 1);
    if (kept) memcpy(kept, dir->valuestring, strlen(dir->valuestring) + 1);
    if (!kept) {
      cJSON_Delete(root);
      return plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
    }
  }
  cJSON_Delete(root);
  free(self->config_dir);
  self->config_dir = kept;
  host_log(self, VOODU_LOG_INFO, kept ? "config_path must lie inside config_dir now" : "config_path may be anywhere now");
  return VOODU_STATUS_OK;
}

/* describe (ABI 1.2): the schema above. */
static VooduStatus haproxy_describe(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  cJSON *schema = cJSON_Parse(HAPROXY_SCHEMA);
  (void)instance;
  (void)request;
  (void)request_len;
  return schema ? plugin_reply(out, VOODU_STATUS_OK, schema) : plugin_fail(out, VOODU_STATUS_ERROR, "out of memory");
}

/* free: releases a reply this plugin wrote; all come from
 * cJSON_PrintUnformatted (through plugin_reply and plugin_fail). */
static void haproxy_free(void *instance, VooduBuffer buffer) {
  (void)instance;
  cJSON_free(buffer.ptr);
}

/* shutdown: frees the instance haproxy_init allocated. */
static void haproxy_shutdown(void *instance) {
  Instance *self = (Instance *)instance;
  if (self) free(self->config_dir);
  free(self);
}

/* Designated initializers: get_extension (no extensions) and any member a
 * later ABI adds stay NULL, "not supported". */
static const VooduPluginV1 HAPROXY_VTABLE = {
    .abi_version = VOODU_ABI_VERSION,
    .struct_size = (uint32_t)sizeof(VooduPluginV1),
    .name = "haproxy",
    .version = "1.0.0",
    .init = haproxy_init,
    .validate = haproxy_validate,
    .publish = haproxy_publish,
    .drain = haproxy_drain,
    .forget = haproxy_forget,
    .free = haproxy_free,
    .shutdown = haproxy_shutdown,
    .describe = haproxy_describe,
    .describe_settings = haproxy_describe_settings, /* ABI 1.3 */
    .configure = haproxy_configure,                 /* ABI 1.3 */
};

VOODU_PLUGIN_EXPORT const VooduPluginV1 *voodu_plugin_entry_v1(void) { return &HAPROXY_VTABLE; }
