/*
 * The HAProxy configuration file: rendering it from a block and its
 * replicas, and writing it where HAProxy reads it.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "haproxy.h"

/* ---- A growing byte buffer ------------------------------------------------ */

void buf_put(Buf *b, const char *s, size_t n) {
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

void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

void buf_uint(Buf *b, unsigned long long value) {
  char digits[32];
  snprintf(digits, sizeof digits, "%llu", value);
  buf_str(b, digits);
}

/* ---- The configuration ----------------------------------------------------- */

/* Appends one `server` line per member of `endpoints` that has a string
 * replica_id and address. */
static void render_servers(const cJSON *endpoints, Buf *config) {
  const cJSON *entry;
  cJSON_ArrayForEach(entry, endpoints) {
    const char *replica_id = string_member(entry, "replica_id");
    const char *address = string_member(entry, "address");
    if (replica_id && address) {
      buf_str(config, "    server ");
      buf_str(config, replica_id);
      buf_str(config, " ");
      buf_str(config, address);
      buf_str(config, "\n");
    }
  }
}

int render_config(const Target *t, unsigned long long generation, const cJSON *endpoints, Buf *config) {
  if (!cJSON_IsArray(endpoints)) return 0;
  buf_str(config, "# Rendered by the voodu haproxy plugin for ");
  buf_str(config, t->scope);
  buf_str(config, "/");
  buf_str(config, t->name);
  buf_str(config, ", generation ");
  buf_uint(config, generation);
  buf_str(config, ". Do not edit: the next publish rewrites it.\nglobal\n");
  if (t->spec.runtime_socket) {
    buf_str(config, "    stats socket ");
    buf_str(config, t->spec.runtime_socket);
    buf_str(config, " mode 600 level admin\n");
  }
  if (t->spec.pid_file) {
    buf_str(config, "    pidfile ");
    buf_str(config, t->spec.pid_file);
    buf_str(config, "\n");
  }
  buf_str(config, "\ndefaults\n    mode ");
  buf_str(config, t->spec.mode);
  buf_str(config, "\n    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n\nfrontend ");
  buf_str(config, t->section);
  buf_str(config, "\n    bind ");
  buf_str(config, t->spec.frontend);
  buf_str(config, "\n    default_backend ");
  buf_str(config, t->section);
  buf_str(config, "\n\nbackend ");
  buf_str(config, t->section);
  buf_str(config, "\n    balance roundrobin\n");
  render_servers(endpoints, config);
  return 1;
}

int write_atomically(const char *path, const Buf *content, char *error, size_t error_cap) {
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

/* Whether `line` (up to its newline) is one that the runtime API changes
 * or that changes with every publish: a server line, or the generation
 * comment. */
static int varies(const char *line) {
  return strncmp(line, "    server ", 11) == 0 || strncmp(line, "# Rendered by", 13) == 0;
}

int same_but_servers(const char *old_config, const char *new_config) {
  const char *a = old_config, *b = new_config;
  for (;;) {
    size_t a_len, b_len;
    while (*a && varies(a)) a += strcspn(a, "\n") + (a[strcspn(a, "\n")] ? 1 : 0);
    while (*b && varies(b)) b += strcspn(b, "\n") + (b[strcspn(b, "\n")] ? 1 : 0);
    if (!*a || !*b) return !*a && !*b;
    a_len = strcspn(a, "\n");
    b_len = strcspn(b, "\n");
    if (a_len != b_len || strncmp(a, b, a_len) != 0) return 0;
    a += a_len + (a[a_len] ? 1 : 0);
    b += b_len + (b[b_len] ? 1 : 0);
  }
}

int read_file(const char *path, Buf *into) {
  char chunk[4096];
  size_t got;
  FILE *file = fopen(path, "r");
  if (!file) return 0;
  while ((got = fread(chunk, 1, sizeof chunk, file)) > 0) buf_put(into, chunk, got);
  fclose(file);
  if (!into->data) buf_str(into, "");
  return !into->failed;
}
