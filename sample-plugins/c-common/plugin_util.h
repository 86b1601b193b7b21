/*
 * Helpers shared by the C sample plugins (echo_c and haproxy): logging
 * through the host, and a minimal JSON scanner that skips values. Each
 * sample includes it by relative path; a plugin of your own can copy it.
 * Everything here is `static`, so each plugin gets its own copy.
 */
#ifndef VOODU_SAMPLE_PLUGIN_UTIL_H
#define VOODU_SAMPLE_PLUGIN_UTIL_H

#include <stddef.h>
#include <string.h>

#include "voodu_plugin.h"

/* Logs one line through the host, if the host's table has a log member. */
static void plugin_log(const VooduHostApi *host, VooduLogLevel level, const char *message) {
  if (host && host->struct_size >= offsetof(VooduHostApi, log) + sizeof(host->log) && host->log) {
    host->log(host->host_ctx, level, (const uint8_t *)message, strlen(message));
  }
}

/* A position in a JSON text. */
typedef struct Cursor {
  const uint8_t *at;
  const uint8_t *end;
} Cursor;

static void skip_space(Cursor *c) {
  while (c->at < c->end && (*c->at == ' ' || *c->at == '\n' || *c->at == '\r' || *c->at == '\t')) c->at++;
}

/* Skips one JSON string starting at its opening quote. Returns 0 on error. */
static int skip_string(Cursor *c) {
  if (c->at >= c->end || *c->at != '"') return 0;
  c->at++;
  while (c->at < c->end) {
    if (*c->at == '\\') {
      if (c->end - c->at < 2) return 0;
      c->at += 2;
    } else if (*c->at++ == '"') {
      return 1;
    }
  }
  return 0;
}

/* Skips one JSON value of any type. Returns 0 on error. */
static int skip_value(Cursor *c) {
  int depth = 0;
  skip_space(c);
  do {
    if (c->at >= c->end) return 0;
    if (*c->at == '"') {
      if (!skip_string(c)) return 0;
    } else if (*c->at == '{' || *c->at == '[') {
      depth++;
      c->at++;
    } else if (*c->at == '}' || *c->at == ']') {
      depth--;
      c->at++;
    } else {
      c->at++;
      /* a scalar (number, true, false, null) ends at a delimiter */
      while (depth == 0 && c->at < c->end && strchr(",}] \n\r\t", *c->at) == NULL) c->at++;
    }
  } while (depth > 0);
  return depth == 0;
}

#endif
