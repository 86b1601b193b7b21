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
 *   }
 *
 * - validate checks the block and fills in the defaults.
 * - publish renders a complete configuration (global, defaults, one
 *   frontend, one backend, one server per replica named by its replica id),
 *   writes it atomically (a temporary file, then rename) and, with a master
 *   socket, asks HAProxy to reload.
 * - drain, with a runtime socket, sets the server to DRAIN and answers
 *   "drained" once its current sessions reach 0; without one it answers
 *   "drained" at once.
 * - forget removes the configuration file.
 *
 * It depends on include/voodu_plugin.h, on ../c-common/plugin_util.h (the
 * samples' own logging and JSON-skipping helpers), and on POSIX for files
 * and unix sockets. Every allocation is freed before the member returns, except
 * reply buffers, which the host hands back to haproxy_free.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "voodu_plugin.h"
#include "../c-common/plugin_util.h"

/* ---- A growing byte buffer ------------------------------------------------ */

typedef struct Buf {
  char *data;
  size_t len;
  size_t cap;
  int failed; /* set when an allocation failed; the content is then unusable */
} Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    char *grown;
    while (b->len + n + 1 > cap) cap *= 2;
    grown = (char *)realloc(b->data, cap);
    if (!grown) {
      b->failed = 1;
      return;
    }
    b->data = grown;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_uint(Buf *b, unsigned long long value) {
  char digits[32];
  snprintf(digits, sizeof digits, "%llu", value);
  buf_str(b, digits);
}

/* The length of the valid UTF-8 sequence starting at `s`, or 0. */
static size_t utf8_sequence(const unsigned char *s) {
  size_t length, i;
  if (s[0] < 0x80) return 1;
  if ((s[0] & 0xE0) == 0xC0) length = 2;
  else if ((s[0] & 0xF0) == 0xE0) length = 3;
  else if ((s[0] & 0xF8) == 0xF0) length = 4;
  else return 0;
  for (i = 1; i < length; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the NUL */
  }
  return length;
}

/* Appends `s` as a JSON string, quoted and escaped. Bytes that are not
 * valid UTF-8 (a message cut inside a character) become '?'. */
static void buf_json(Buf *b, const char *s) {
  buf_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch >= 0x80) {
      size_t length = utf8_sequence((const unsigned char *)s);
      if (length == 0) {
        buf_put(b, "?", 1);
      } else {
        buf_put(b, s, length);
        s += length - 1;
      }
    } else if (ch == '"' || ch == '\\') {
      char escaped[2];
      escaped[0] = '\\';
      escaped[1] = (char)ch;
      buf_put(b, escaped, 2);
    } else if (ch < 0x20) {
      char escaped[8];
      snprintf(escaped, sizeof escaped, "\\u%04x", ch);
      buf_str(b, escaped);
    } else {
      buf_put(b, s, 1);
    }
  }
  buf_put(b, "\"", 1);
}

/* ---- Reading JSON --------------------------------------------------------- */

/* Calls `visit(key, key_len, value_cursor, context)` for each member of the
 * object at the cursor; stops early when it returns 0. Returns 0 when the
 * JSON is not an object or is malformed. */
typedef int (*MemberVisitor)(const char *key, size_t key_len, Cursor *value, void *context);

static int each_member(Cursor *c, MemberVisitor visit, void *context) {
  skip_space(c);
  if (c->at >= c->end || *c->at != '{') return 0;
  c->at++;
  for (;;) {
    const uint8_t *name;
    size_t name_len;
    Cursor value;
    skip_space(c);
    if (c->at < c->end && *c->at == '}') {
      c->at++;
      return 1;
    }
    name = c->at + 1;
    if (!skip_string(c)) return 0;
    name_len = (size_t)(c->at - name) - 1;
    skip_space(c);
    if (c->at >= c->end || *c->at != ':') return 0;
    c->at++;
    skip_space(c);
    value = *c;
    if (!skip_value(c)) return 0;
    value.end = c->at;
    if (!visit((const char *)name, name_len, &value, context)) return 1;
    skip_space(c);
    if (c->at < c->end && *c->at == ',') c->at++;
  }
}

typedef struct Lookup {
  const char *key;
  Cursor found;
  int present;
} Lookup;

static int match_key(const char *key, size_t key_len, Cursor *value, void *context) {
  Lookup *lookup = (Lookup *)context;
  if (strlen(lookup->key) == key_len && memcmp(lookup->key, key, key_len) == 0) {
    lookup->found = *value;
    lookup->present = 1;
    return 0;
  }
  return 1;
}

/* The value of `key` in the object `object`; returns 0 when absent. */
static int member(Cursor object, const char *key, Cursor *value) {
  Lookup lookup;
  lookup.key = key;
  lookup.present = 0;
  if (!each_member(&object, match_key, &lookup) || !lookup.present) return 0;
  *value = lookup.found;
  return 1;
}

/* Decodes the JSON string at the cursor into a new NUL-terminated string
 * (the caller frees it). Returns NULL if it is not a string. Escapes other
 * than the common ones and \u00XX become '?'. */
static char *read_string(Cursor value) {
  Buf b = {NULL, 0, 0, 0};
  skip_space(&value);
  if (value.at >= value.end || *value.at != '"') return NULL;
  value.at++;
  while (value.at < value.end && *value.at != '"') {
    char ch = (char)*value.at++;
    if (ch == '\\' && value.at < value.end) {
      char escaped = (char)*value.at++;
      switch (escaped) {
        case 'n': ch = '\n'; break;
        case 't': ch = '\t'; break;
        case 'r': ch = '\r'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'u':
          ch = '?';
          if (value.end - value.at >= 4 && value.at[0] == '0' && value.at[1] == '0') {
            char hex[3];
            hex[0] = (char)value.at[2];
            hex[1] = (char)value.at[3];
            hex[2] = '\0';
            ch = (char)strtol(hex, NULL, 16);
          }
          value.at += value.end - value.at >= 4 ? 4 : value.end - value.at;
          break;
        default: ch = escaped; break;
      }
    }
    buf_put(&b, &ch, 1);
  }
  if (b.failed || value.at >= value.end) {
    free(b.data);
    return NULL;
  }
  if (!b.data) {
    b.data = (char *)malloc(1);
    if (b.data) b.data[0] = '\0';
  }
  return b.data;
}

/* Reads a whole non-negative number; returns 0 if the value is not one. */
static int read_uint(Cursor value, unsigned long long *out) {
  unsigned long long number = 0;
  int digits = 0;
  skip_space(&value);
  while (value.at < value.end && *value.at >= '0' && *value.at <= '9') {
    number = number * 10 + (unsigned long long)(*value.at - '0');
    value.at++;
    digits++;
    if (digits > 18) return 0;
  }
  skip_space(&value);
  if (!digits || value.at != value.end) return 0;
  *out = number;
  return 1;
}

/* The string member `key` of `object`, or NULL. */
static char *string_member(Cursor object, const char *key) {
  Cursor value;
  return member(object, key, &value) ? read_string(value) : NULL;
}

/* ---- The block ------------------------------------------------------------ */

static const char *const KNOWN_KEYS[] = {"port", "config_path", "frontend", "mode",
                                         "runtime_socket", "master_socket", "network"};
#define KNOWN_KEY_COUNT (sizeof KNOWN_KEYS / sizeof KNOWN_KEYS[0])
#define KNOWN_KEY_LIST "port, config_path, frontend, mode, runtime_socket, master_socket, network"

typedef struct Spec {
  unsigned long long port;
  char *config_path;
  char *frontend;
  char *mode;
  char *runtime_socket;
  char *master_socket;
  char *network;
} Spec;

static void spec_free(Spec *spec) {
  free(spec->config_path);
  free(spec->frontend);
  free(spec->mode);
  free(spec->runtime_socket);
  free(spec->master_socket);
  free(spec->network);
  memset(spec, 0, sizeof *spec);
}

typedef struct KeyCheck {
  char unknown[64];
} KeyCheck;

static int check_key(const char *key, size_t key_len, Cursor *value, void *context) {
  KeyCheck *check = (KeyCheck *)context;
  size_t i;
  (void)value;
  for (i = 0; i < KNOWN_KEY_COUNT; i++) {
    if (strlen(KNOWN_KEYS[i]) == key_len && memcmp(KNOWN_KEYS[i], key, key_len) == 0) return 1;
  }
  snprintf(check->unknown, sizeof check->unknown, "%.*s", (int)(key_len < 60 ? key_len : 60), key);
  return 0;
}

/* An optional string member: 1 and *out set (maybe NULL when absent), or 0
 * and a refusal in `error` when present but not a non-empty string. */
static int optional_string(Cursor spec, const char *key, char **out, char *error, size_t error_cap) {
  Cursor value;
  *out = NULL;
  if (!member(spec, key, &value)) return 1;
  *out = read_string(value);
  if (!*out || !**out) {
    free(*out);
    *out = NULL;
    snprintf(error, error_cap, "%s must be a non-empty string", key);
    return 0;
  }
  {
    /* The value goes into the HAProxy configuration as one word. */
    const char *at;
    for (at = *out; *at; at++) {
      if ((unsigned char)*at <= ' ' || *at == '#') {
        free(*out);
        *out = NULL;
        snprintf(error, error_cap, "%s must be one word, without spaces, '#' or control characters", key);
        return 0;
      }
    }
  }
  return 1;
}

/* Checks a block body and fills in defaults. Returns 0 with a refusal, in
 * the seed's tone, in `error`. */
static int parse_spec(Cursor body, Spec *spec, char *error, size_t error_cap) {
  Cursor value;
  KeyCheck check;
  Cursor walk = body;
  memset(spec, 0, sizeof *spec);
  check.unknown[0] = '\0';
  if (!each_member(&walk, check_key, &check)) {
    snprintf(error, error_cap, "a haproxy block is a block body, not a value");
    return 0;
  }
  if (check.unknown[0]) {
    snprintf(error, error_cap, "unknown key \"%s\" — a haproxy block takes " KNOWN_KEY_LIST, check.unknown);
    return 0;
  }
  if (!member(body, "port", &value)) {
    snprintf(error, error_cap, "port is required — write haproxy { port = 8084 } with the replicas' port");
    return 0;
  }
  if (!read_uint(value, &spec->port) || spec->port < 1 || spec->port > 65535) {
    snprintf(error, error_cap, "port must be a number from 1 to 65535");
    return 0;
  }
  if (!optional_string(body, "config_path", &spec->config_path, error, error_cap)) goto refused;
  if (!spec->config_path) {
    snprintf(error, error_cap,
             "config_path is required — write config_path = \"/etc/haproxy/voodu.cfg\", where the plugin writes the configuration");
    goto refused;
  }
  if (!optional_string(body, "frontend", &spec->frontend, error, error_cap)) goto refused;
  if (!spec->frontend) {
    char frontend[32];
    snprintf(frontend, sizeof frontend, "127.0.0.1:%llu", spec->port);
    spec->frontend = (char *)malloc(strlen(frontend) + 1);
    if (!spec->frontend) goto out_of_memory;
    strcpy(spec->frontend, frontend);
  }
  if (!optional_string(body, "mode", &spec->mode, error, error_cap)) goto refused;
  if (!spec->mode) {
    spec->mode = (char *)malloc(4);
    if (!spec->mode) goto out_of_memory;
    strcpy(spec->mode, "tcp");
  }
  if (strcmp(spec->mode, "tcp") != 0 && strcmp(spec->mode, "http") != 0) {
    snprintf(error, error_cap, "mode must be \"tcp\" or \"http\", not \"%.40s\"", spec->mode);
    goto refused;
  }
  if (!optional_string(body, "runtime_socket", &spec->runtime_socket, error, error_cap)) goto refused;
  if (!optional_string(body, "master_socket", &spec->master_socket, error, error_cap)) goto refused;
  if (!optional_string(body, "network", &spec->network, error, error_cap)) goto refused;
  return 1;
out_of_memory:
  snprintf(error, error_cap, "out of memory");
refused:
  spec_free(spec);
  return 0;
}

static void spec_json(Buf *b, const Spec *spec) {
  buf_str(b, "{\"port\":");
  buf_uint(b, spec->port);
  buf_str(b, ",\"config_path\":");
  buf_json(b, spec->config_path);
  buf_str(b, ",\"frontend\":");
  buf_json(b, spec->frontend);
  buf_str(b, ",\"mode\":");
  buf_json(b, spec->mode);
  if (spec->runtime_socket) {
    buf_str(b, ",\"runtime_socket\":");
    buf_json(b, spec->runtime_socket);
  }
  if (spec->master_socket) {
    buf_str(b, ",\"master_socket\":");
    buf_json(b, spec->master_socket);
  }
  if (spec->network) {
    buf_str(b, ",\"network\":");
    buf_json(b, spec->network);
  }
  buf_str(b, "}");
}

/* ---- Instance, logging, replies ------------------------------------------- */

typedef struct Instance {
  const VooduHostApi *host;
} Instance;

static void host_log(const Instance *self, VooduLogLevel level, const char *message) {
  if (self) plugin_log(self->host, level, message);
}

/* Hands `b` to the host as the reply; frees it on allocation failure. */
static VooduStatus reply_buf(VooduBuffer *out, VooduStatus status, Buf *b) {
  if (b->failed || !b->data) {
    free(b->data);
    return VOODU_STATUS_ERROR;
  }
  out->ptr = (uint8_t *)b->data;
  out->len = b->len;
  return status;
}

static VooduStatus fail(VooduBuffer *out, VooduStatus status, const char *message) {
  Buf b = {NULL, 0, 0, 0};
  buf_str(&b, "{\"message\":");
  buf_json(&b, message);
  buf_str(&b, "}");
  return reply_buf(out, status, &b);
}

/* ---- The block in a request ----------------------------------------------- */

typedef struct Target {
  char *scope;
  char *name;
  char *block_type;
  char *label; /* the first label, or NULL */
  Spec spec;
  char section[160]; /* the frontend and backend name */
} Target;

static void target_free(Target *t) {
  free(t->scope);
  free(t->name);
  free(t->block_type);
  free(t->label);
  spec_free(&t->spec);
}

/* Reads scope, name and block from a publish/drain/forget request. */
static int read_target(Cursor request, Target *t, char *error, size_t error_cap) {
  Cursor block, spec, labels;
  size_t i;
  memset(t, 0, sizeof *t);
  t->scope = string_member(request, "scope");
  t->name = string_member(request, "name");
  if (!t->scope || !t->name || !member(request, "block", &block) || !member(block, "spec", &spec)) {
    snprintf(error, error_cap, "malformed request: no scope, name or block");
    target_free(t);
    return 0;
  }
  t->block_type = string_member(block, "type");
  if (member(block, "labels", &labels)) {
    skip_space(&labels);
    if (labels.at < labels.end && *labels.at == '[') {
      labels.at++;
      t->label = read_string(labels);
    }
  }
  if (!parse_spec(spec, &t->spec, error, error_cap)) {
    target_free(t);
    return 0;
  }
  snprintf(t->section, sizeof t->section, "voodu_%s_%s_%s", t->scope, t->name,
           t->label ? t->label : (t->block_type ? t->block_type : "haproxy"));
  for (i = 0; t->section[i]; i++) {
    char ch = t->section[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '_' || ch == '-' || ch == '.';
    if (!ok) t->section[i] = '_';
  }
  return 1;
}

/* ---- HAProxy's sockets ---------------------------------------------------- */

/* Sends one command to a unix socket and reads the whole answer into `answer`
 * (which may be NULL). Returns 1 on success, -1 when nothing listens there
 * (HAProxy is not running), and 0 with an explanation in `error` on any
 * other failure. */
static int socket_command(const char *path, const char *command, Buf *answer, char *error, size_t error_cap) {
  struct sockaddr_un address;
  struct timeval timeout;
  char chunk[4096];
  ssize_t got;
  int fd;
  if (strlen(path) >= sizeof address.sun_path) {
    snprintf(error, error_cap, "socket path %.60s is too long", path);
    return 0;
  }
  fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) {
    snprintf(error, error_cap, "cannot open a socket: %s", strerror(errno));
    return 0;
  }
  timeout.tv_sec = 2;
  timeout.tv_usec = 0;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  memset(&address, 0, sizeof address);
  address.sun_family = AF_UNIX;
  strcpy(address.sun_path, path);
  if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
    int not_listening = errno == ENOENT || errno == ECONNREFUSED;
    snprintf(error, error_cap, "cannot connect to HAProxy at %.80s: %s", path, strerror(errno));
    close(fd);
    return not_listening ? -1 : 0;
  }
  if (write(fd, command, strlen(command)) != (ssize_t)strlen(command)) {
    snprintf(error, error_cap, "cannot send to HAProxy at %.80s: %s", path, strerror(errno));
    close(fd);
    return 0;
  }
  while ((got = read(fd, chunk, sizeof chunk)) > 0) {
    if (answer) buf_put(answer, chunk, (size_t)got);
  }
  close(fd);
  return 1;
}

/* The current sessions of server `backend/server` in a `show stat` CSV, or
 * -1 when it is not listed. */
static long current_sessions(const char *csv, const char *backend, const char *server) {
  const char *line = csv;
  while (line && *line) {
    const char *next = strchr(line, '\n');
    size_t backend_len = strlen(backend), server_len = strlen(server);
    if (strncmp(line, backend, backend_len) == 0 && line[backend_len] == ',' &&
        strncmp(line + backend_len + 1, server, server_len) == 0 && line[backend_len + 1 + server_len] == ',') {
      /* pxname,svname,qcur,qmax,scur,... */
      const char *field = line;
      int column;
      for (column = 0; column < 4 && field; column++) {
        field = strchr(field, ',');
        if (field) field++;
      }
      return field ? strtol(field, NULL, 10) : -1;
    }
    line = next ? next + 1 : NULL;
  }
  return -1;
}

/* ---- The vtable members ---------------------------------------------------- */

static VooduStatus haproxy_init(const VooduHostApi *host, void **out_instance, VooduBuffer *out) {
  Instance *self = (Instance *)malloc(sizeof *self);
  if (!self) return fail(out, VOODU_STATUS_ERROR, "out of memory");
  self->host = host;
  *out_instance = self;
  return VOODU_STATUS_OK;
}

static VooduStatus haproxy_validate(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  Cursor c, block, body;
  Spec spec;
  char error[256];
  Buf b = {NULL, 0, 0, 0};
  (void)instance;
  c.at = request;
  c.end = request + request_len;
  if (!member(c, "block", &block) || !member(block, "spec", &body)) {
    return fail(out, VOODU_STATUS_ERROR, "malformed validate request: no block.spec");
  }
  if (!parse_spec(body, &spec, error, sizeof error)) return fail(out, VOODU_STATUS_REFUSED, error);
  if (spec.network && strcmp(spec.network, "voodu0") != 0) {
    snprintf(error, sizeof error,
             "network must be \"voodu0\" (HAProxy runs on voodu0 and reaches replicas by name), not \"%.40s\"",
             spec.network);
    spec_free(&spec);
    return fail(out, VOODU_STATUS_REFUSED, error);
  }
  buf_str(&b, "{\"spec\":");
  spec_json(&b, &spec);
  buf_str(&b, ",\"endpoints\":{\"port\":");
  buf_uint(&b, spec.port);
  buf_str(&b, spec.network ? ",\"addressing\":\"dns\"}}" : ",\"addressing\":\"ip\"}}");
  spec_free(&spec);
  return reply_buf(out, VOODU_STATUS_OK, &b);
}

/* Appends one `server` line per endpoint of the array at the cursor. */
static int render_servers(Cursor endpoints, Buf *config) {
  skip_space(&endpoints);
  if (endpoints.at >= endpoints.end || *endpoints.at != '[') return 0;
  endpoints.at++;
  for (;;) {
    Cursor entry;
    char *replica_id, *address;
    skip_space(&endpoints);
    if (endpoints.at < endpoints.end && *endpoints.at == ']') return 1;
    entry = endpoints;
    if (!skip_value(&endpoints)) return 0;
    entry.end = endpoints.at;
    replica_id = string_member(entry, "replica_id");
    address = string_member(entry, "address");
    if (replica_id && address) {
      buf_str(config, "    server ");
      buf_str(config, replica_id);
      buf_str(config, " ");
      buf_str(config, address);
      buf_str(config, "\n");
    }
    free(replica_id);
    free(address);
    skip_space(&endpoints);
    if (endpoints.at < endpoints.end && *endpoints.at == ',') endpoints.at++;
  }
}

/* Writes `content` to `path` through a temporary file and a rename, so
 * HAProxy never reads half a configuration. */
static int write_atomically(const char *path, const Buf *content, char *error, size_t error_cap) {
  Buf temporary = {NULL, 0, 0, 0};
  char pid[24];
  FILE *file;
  int ok;
  snprintf(pid, sizeof pid, ".tmp.%ld", (long)getpid());
  buf_str(&temporary, path);
  buf_str(&temporary, pid);
  if (temporary.failed) {
    free(temporary.data);
    snprintf(error, error_cap, "out of memory");
    return 0;
  }
  file = fopen(temporary.data, "w");
  if (!file) {
    snprintf(error, error_cap, "cannot write %.120s: %s", temporary.data, strerror(errno));
    free(temporary.data);
    return 0;
  }
  ok = fwrite(content->data, 1, content->len, file) == content->len;
  ok = fclose(file) == 0 && ok;
  if (!ok || rename(temporary.data, path) != 0) {
    snprintf(error, error_cap, "cannot write %.120s: %s", path, strerror(errno));
    remove(temporary.data);
    free(temporary.data);
    return 0;
  }
  free(temporary.data);
  return 1;
}

static VooduStatus haproxy_publish(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  Cursor c, endpoints, generation_value;
  Target t;
  Buf config = {NULL, 0, 0, 0};
  char error[256];
  unsigned long long generation = 0;
  c.at = request;
  c.end = request + request_len;
  if (!read_target(c, &t, error, sizeof error)) return fail(out, VOODU_STATUS_ERROR, error);
  if (member(c, "generation", &generation_value)) read_uint(generation_value, &generation);

  buf_str(&config, "# Rendered by the voodu haproxy plugin for ");
  buf_str(&config, t.scope);
  buf_str(&config, "/");
  buf_str(&config, t.name);
  buf_str(&config, ", generation ");
  buf_uint(&config, generation);
  buf_str(&config, ". Do not edit: the next publish rewrites it.\nglobal\n");
  if (t.spec.runtime_socket) {
    buf_str(&config, "    stats socket ");
    buf_str(&config, t.spec.runtime_socket);
    buf_str(&config, " mode 600 level admin\n");
  }
  buf_str(&config, "\ndefaults\n    mode ");
  buf_str(&config, t.spec.mode);
  buf_str(&config, "\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n\nfrontend ");
  buf_str(&config, t.section);
  buf_str(&config, "\n    bind ");
  buf_str(&config, t.spec.frontend);
  buf_str(&config, "\n    default_backend ");
  buf_str(&config, t.section);
  buf_str(&config, "\n\nbackend ");
  buf_str(&config, t.section);
  buf_str(&config, "\n    balance roundrobin\n");
  if (!member(c, "endpoints", &endpoints) || !render_servers(endpoints, &config)) {
    free(config.data);
    target_free(&t);
    return fail(out, VOODU_STATUS_ERROR, "malformed publish request: no endpoints array");
  }
  if (config.failed || !write_atomically(t.spec.config_path, &config, error, sizeof error)) {
    if (config.failed) snprintf(error, sizeof error, "out of memory");
    free(config.data);
    target_free(&t);
    return fail(out, VOODU_STATUS_ERROR, error);
  }
  free(config.data);
  if (t.spec.master_socket) {
    int reloaded = socket_command(t.spec.master_socket, "reload\n", NULL, error, sizeof error);
    if (reloaded == 0) {
      target_free(&t);
      return fail(out, VOODU_STATUS_ERROR, error);
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

static VooduStatus haproxy_drain(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  Cursor c, replica;
  Target t;
  Buf command = {NULL, 0, 0, 0};
  Buf stats = {NULL, 0, 0, 0};
  Buf b = {NULL, 0, 0, 0};
  char error[256];
  char *replica_id;
  long sessions;
  (void)instance;
  c.at = request;
  c.end = request + request_len;
  if (!read_target(c, &t, error, sizeof error)) return fail(out, VOODU_STATUS_ERROR, error);
  replica_id = member(c, "replica", &replica) ? string_member(replica, "replica_id") : NULL;
  if (!replica_id) {
    target_free(&t);
    return fail(out, VOODU_STATUS_ERROR, "malformed drain request: no replica.replica_id");
  }
  if (!t.spec.runtime_socket) {
    free(replica_id);
    target_free(&t);
    buf_str(&b, "{\"state\":\"drained\"}");
    return reply_buf(out, VOODU_STATUS_OK, &b);
  }
  buf_str(&command, "set server ");
  buf_str(&command, t.section);
  buf_str(&command, "/");
  buf_str(&command, replica_id);
  buf_str(&command, " state drain\n");
  if (command.failed || socket_command(t.spec.runtime_socket, command.data, NULL, error, sizeof error) != 1 ||
      socket_command(t.spec.runtime_socket, "show stat\n", &stats, error, sizeof error) != 1) {
    free(command.data);
    free(stats.data);
    free(replica_id);
    target_free(&t);
    return fail(out, VOODU_STATUS_ERROR, error);
  }
  sessions = stats.data ? current_sessions(stats.data, t.section, replica_id) : -1;
  free(command.data);
  free(stats.data);
  free(replica_id);
  target_free(&t);
  buf_str(&b, sessions > 0 ? "{\"state\":\"draining\",\"retry_after_ms\":100}" : "{\"state\":\"drained\"}");
  return reply_buf(out, VOODU_STATUS_OK, &b);
}

static VooduStatus haproxy_forget(void *instance, const uint8_t *request, size_t request_len, VooduBuffer *out) {
  Cursor c;
  Target t;
  char error[256];
  c.at = request;
  c.end = request + request_len;
  if (!read_target(c, &t, error, sizeof error)) return fail(out, VOODU_STATUS_ERROR, error);
  if (remove(t.spec.config_path) != 0 && errno != ENOENT) {
    snprintf(error, sizeof error, "cannot remove %.120s: %s", t.spec.config_path, strerror(errno));
    target_free(&t);
    return fail(out, VOODU_STATUS_ERROR, error);
  }
  host_log((const Instance *)instance, VOODU_LOG_INFO, "removed the HAProxy configuration");
  target_free(&t);
  return VOODU_STATUS_OK;
}

static void haproxy_free(void *instance, VooduBuffer buffer) {
  (void)instance;
  free(buffer.ptr);
}

static void haproxy_shutdown(void *instance) { free(instance); }

static const VooduPluginV1 HAPROXY_VTABLE = {
    VOODU_ABI_VERSION,
    (uint32_t)sizeof(VooduPluginV1),
    "haproxy",
    "1.0.0",
    haproxy_init,
    haproxy_validate,
    haproxy_publish,
    haproxy_drain,
    haproxy_forget,
    haproxy_free,
    haproxy_shutdown,
    NULL, /* get_extension: no extensions */
};

VOODU_PLUGIN_EXPORT const VooduPluginV1 *voodu_plugin_entry_v1(void) { return &HAPROXY_VTABLE; }
