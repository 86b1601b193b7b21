/*
 * The haproxy block: checking it, filling in its defaults, writing it back
 * as the normalised spec, and reading the block a request is about.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "haproxy.h"

static const char *const KNOWN_KEYS[] = {"port", "config_path", "frontend", "mode",
                                         "runtime_socket", "master_socket", "network", "pid_file"};
#define KNOWN_KEY_COUNT (sizeof KNOWN_KEYS / sizeof KNOWN_KEYS[0])
#define KNOWN_KEY_LIST "port, config_path, frontend, mode, runtime_socket, master_socket, network, pid_file"

/* A copy of `s` the caller frees, or NULL when out of memory. */
static char *copy_string(const char *s) {
  size_t size = strlen(s) + 1;
  char *copy = (char *)malloc(size);
  if (copy) memcpy(copy, s, size);
  return copy;
}

const char *string_member(const cJSON *object, const char *key) {
  /* Case-sensitive: cJSON_GetObjectItem ignores case. */
  const cJSON *value = cJSON_GetObjectItemCaseSensitive(object, key);
  return cJSON_IsString(value) ? value->valuestring : NULL;
}

void spec_free(Spec *spec) {
  free(spec->config_path);
  free(spec->frontend);
  free(spec->mode);
  free(spec->runtime_socket);
  free(spec->master_socket);
  free(spec->network);
  free(spec->pid_file);
  memset(spec, 0, sizeof *spec);
}

static int known_key(const char *key) {
  size_t i;
  for (i = 0; i < KNOWN_KEY_COUNT; i++) {
    if (strcmp(KNOWN_KEYS[i], key) == 0) return 1;
  }
  return 0;
}

/* An optional string member: 1 and *out set (NULL when absent), or 0 and a
 * refusal in `error` when present but not a non-empty string, with `key`
 * (a static string) in *option. */
static int optional_string(const cJSON *body, const char *key, char **out, char *error, size_t error_cap,
                           const char **option) {
  const cJSON *value = cJSON_GetObjectItemCaseSensitive(body, key);
  const char *at;
  *out = NULL;
  if (!value) return 1;
  if (!cJSON_IsString(value) || !value->valuestring[0]) {
    snprintf(error, error_cap, "%s must be a non-empty string", key);
    *option = key;
    return 0;
  }
  /* The value goes into the HAProxy configuration as one word. */
  for (at = value->valuestring; *at; at++) {
    if ((unsigned char)*at <= ' ' || *at == '#') {
      snprintf(error, error_cap, "%s must be one word, without spaces, '#' or control characters", key);
      *option = key;
      return 0;
    }
  }
  *out = copy_string(value->valuestring);
  if (!*out) {
    snprintf(error, error_cap, "out of memory");
    return 0;
  }
  return 1;
}

int parse_spec(const cJSON *body, Spec *spec, char *error, size_t error_cap, const char **option) {
  const cJSON *member, *port;
  memset(spec, 0, sizeof *spec);
  *option = NULL;
  if (!cJSON_IsObject(body)) {
    snprintf(error, error_cap, "a haproxy block is a block body, not a value");
    return 0;
  }
  cJSON_ArrayForEach(member, body) {
    if (!known_key(member->string)) {
      snprintf(error, error_cap, "unknown key \"%.60s\" — a haproxy block takes " KNOWN_KEY_LIST, member->string);
      return 0;
    }
  }
  port = cJSON_GetObjectItemCaseSensitive(body, "port");
  if (!port) {
    snprintf(error, error_cap, "port is required — write haproxy { port = 8084 } with the replicas' port");
    return 0;
  }
  if (!cJSON_IsNumber(port) || !(port->valuedouble >= 1 && port->valuedouble <= 65535) ||
      port->valuedouble != (double)(unsigned)port->valuedouble) {
    snprintf(error, error_cap, "port must be a number from 1 to 65535");
    *option = "port";
    return 0;
  }
  spec->port = (unsigned long long)port->valuedouble;
  if (!optional_string(body, "config_path", &spec->config_path, error, error_cap, option)) goto refused;
  if (!spec->config_path) {
    snprintf(error, error_cap,
             "config_path is required — write config_path = \"/etc/haproxy/voodu.cfg\", where the plugin writes the configuration");
    goto refused;
  }
  if (!optional_string(body, "frontend", &spec->frontend, error, error_cap, option)) goto refused;
  if (!spec->frontend) {
    char frontend[32];
    snprintf(frontend, sizeof frontend, "127.0.0.1:%llu", spec->port);
    if (!(spec->frontend = copy_string(frontend))) goto out_of_memory;
  }
  if (!optional_string(body, "mode", &spec->mode, error, error_cap, option)) goto refused;
  if (!spec->mode && !(spec->mode = copy_string("tcp"))) goto out_of_memory;
  if (strcmp(spec->mode, "tcp") != 0 && strcmp(spec->mode, "http") != 0) {
    snprintf(error, error_cap, "mode must be \"tcp\" or \"http\", not \"%.40s\"", spec->mode);
    *option = "mode";
    goto refused;
  }
  if (!optional_string(body, "runtime_socket", &spec->runtime_socket, error, error_cap, option)) goto refused;
  if (!optional_string(body, "master_socket", &spec->master_socket, error, error_cap, option)) goto refused;
  if (!optional_string(body, "network", &spec->network, error, error_cap, option)) goto refused;
  if (!optional_string(body, "pid_file", &spec->pid_file, error, error_cap, option)) goto refused;
  return 1;
out_of_memory:
  snprintf(error, error_cap, "out of memory");
refused:
  spec_free(spec);
  return 0;
}

int validate_spec(const cJSON *body, Spec *spec, char *error, size_t error_cap, const char **option) {
  if (!parse_spec(body, spec, error, error_cap, option)) return 0;
  if (spec->network && strcmp(spec->network, "voodu0") != 0) {
    snprintf(error, error_cap,
             "network must be \"voodu0\" (HAProxy runs on voodu0 and reaches replicas by name), not \"%.40s\"",
             spec->network);
    *option = "network";
    spec_free(spec);
    return 0;
  }
  if (spec->pid_file && spec->network) {
    snprintf(error, error_cap,
             "pid_file cannot count the connections of an HAProxy on network voodu0 (it reaches replicas by "
             "name, from another network namespace) — drain through runtime_socket instead");
    *option = "pid_file";
    spec_free(spec);
    return 0;
  }
  return 1;
}

cJSON *spec_json(const Spec *spec) {
  cJSON *json = cJSON_CreateObject();
  int ok = json && cJSON_AddNumberToObject(json, "port", (double)spec->port) &&
           cJSON_AddStringToObject(json, "config_path", spec->config_path) &&
           cJSON_AddStringToObject(json, "frontend", spec->frontend) &&
           cJSON_AddStringToObject(json, "mode", spec->mode) &&
           (!spec->runtime_socket || cJSON_AddStringToObject(json, "runtime_socket", spec->runtime_socket)) &&
           (!spec->master_socket || cJSON_AddStringToObject(json, "master_socket", spec->master_socket)) &&
           (!spec->network || cJSON_AddStringToObject(json, "network", spec->network)) &&
           (!spec->pid_file || cJSON_AddStringToObject(json, "pid_file", spec->pid_file));
  if (!ok) {
    cJSON_Delete(json);
    return NULL;
  }
  return json;
}

void target_free(Target *t) {
  free(t->scope);
  free(t->name);
  free(t->block_type);
  free(t->label);
  spec_free(&t->spec);
  memset(t, 0, sizeof *t);
}

/* A copy of the string member `key` of `object`: 1 with *out set (NULL
 * when absent or not a string), or 0 when out of memory. */
static int copy_member(const cJSON *object, const char *key, char **out) {
  const char *value = string_member(object, key);
  *out = value ? copy_string(value) : NULL;
  return !value || *out;
}

int read_target(const cJSON *request, Target *t, char *error, size_t error_cap) {
  const cJSON *block = cJSON_GetObjectItemCaseSensitive(request, "block");
  const cJSON *spec = cJSON_GetObjectItemCaseSensitive(block, "spec");
  const cJSON *labels = cJSON_GetObjectItemCaseSensitive(block, "labels");
  const cJSON *first_label = cJSON_IsArray(labels) ? labels->child : NULL;
  const char *option = NULL;
  size_t i;
  memset(t, 0, sizeof *t);
  if (!string_member(request, "scope") || !string_member(request, "name") || !spec) {
    snprintf(error, error_cap, "malformed request: no scope, name or block");
    return 0;
  }
  if (!copy_member(request, "scope", &t->scope) || !copy_member(request, "name", &t->name) ||
      !copy_member(block, "type", &t->block_type) ||
      (first_label && cJSON_IsString(first_label) && !(t->label = copy_string(first_label->valuestring)))) {
    snprintf(error, error_cap, "out of memory");
    target_free(t);
    return 0;
  }
  if (!parse_spec(spec, &t->spec, error, error_cap, &option)) {
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
