/*
 * The samples' shared helpers; see plugin_util.h for what each one does and
 * who owns what. Built into each sample's shared object (every symbol is
 * hidden: the build passes -fvisibility=hidden).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin_util.h"

void plugin_log(const VooduHostApi *host, VooduLogLevel level, const char *message) {
  if (host && host->struct_size >= offsetof(VooduHostApi, log) + sizeof(host->log) && host->log) {
    host->log(host->host_ctx, level, (const uint8_t *)message, strlen(message));
  }
}

int plugin_metric(const VooduHostApi *host, const char *name, uint32_t kind, double value) {
  if (!host || host->struct_size < offsetof(VooduHostApi, metric) + sizeof(host->metric) ||
      !host->metric) {
    return 0;
  }
  return host->metric(host->host_ctx, (const uint8_t *)name, strlen(name), kind, value) ==
         VOODU_STATUS_OK;
}

int plugin_connections(const VooduHostApi *host, const char *address, int32_t pid, uint64_t *count, char *error,
                       size_t error_cap) {
  if (!host || host->struct_size < offsetof(VooduHostApi, connections) + sizeof(host->connections) ||
      !host->connections) {
    snprintf(error, error_cap, "this controller is older than ABI 1.3 and counts no connections");
    return 0;
  }
  if (error_cap > 0) error[0] = '\0';
  return host->connections(host->host_ctx, (const uint8_t *)address, strlen(address), pid, count, error,
                           error_cap) == VOODU_STATUS_OK;
}

/* The length of the well-formed UTF-8 sequence at `s`, which has `available`
 * bytes, or 0 when there is none (what Rust's str::from_utf8 accepts). */
static size_t utf8_length(const unsigned char *s, size_t available) {
  unsigned char low = 0x80, high = 0xBF;
  size_t length, i;
  if (available == 0) return 0;
  if (s[0] < 0x80) return 1;
  if (s[0] < 0xC2) return 0;
  if (s[0] < 0xE0) {
    length = 2;
  } else if (s[0] < 0xF0) {
    length = 3;
    if (s[0] == 0xE0) low = 0xA0; /* no overlong form */
    if (s[0] == 0xED) high = 0x9F; /* no UTF-16 surrogate */
  } else if (s[0] < 0xF5) {
    length = 4;
    if (s[0] == 0xF0) low = 0x90; /* no overlong form */
    if (s[0] == 0xF4) high = 0x8F; /* nothing above U+10FFFF */
  } else {
    return 0;
  }
  if (available < length || s[1] < low || s[1] > high) return 0;
  for (i = 2; i < length; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
  }
  return length;
}

/* Counts the \u0000 escapes in a JSON text. With `twin` (a copy of the
 * text), also turns each into \u0001 there. A backslash starts an escape
 * unless the backslash before it did (backslashes appear only in strings). */
static size_t nul_escapes(const uint8_t *text, size_t len, char *twin) {
  size_t i, count = 0;
  int escaped = 0;
  for (i = 0; i < len; i++) {
    if (escaped) {
      escaped = 0;
    } else if (text[i] == '\\') {
      escaped = 1;
      if (len - i >= 6 && memcmp(text + i + 1, "u0000", 5) == 0) {
        count++;
        if (twin) twin[i + 5] = '1';
      }
    }
  }
  return count;
}

/* Writes the path of `item`, a child of the value whose path is
 * `path[0..at)`, into `path` (`.key` for a member, `[index]` for an array
 * element; truncated to `cap`). Returns the new length. */
static size_t path_append(char *path, size_t cap, size_t at, const cJSON *item, size_t index) {
  int written;
  if (item->string) {
    written = snprintf(path + at, cap - at, at ? ".%s" : "%s", item->string);
  } else {
    written = snprintf(path + at, cap - at, "[%zu]", index);
  }
  if (written < 0) return at;
  return at + (size_t)written < cap ? at + (size_t)written : cap - 1;
}

/* Finds a string or key of `a` cut short by a NUL. `b` is the same text
 * parsed with every \u0000 turned into \u0001, so a string of `a` shorter
 * than its twin in `b` held a NUL. Returns 0 when there is none, 1 for a
 * value and 2 for a key, with the path of its value or member in `path`. */
static int find_nul(const cJSON *a, const cJSON *b, char *path, size_t cap, size_t at) {
  size_t index = 0;
  if (cJSON_IsString(a) && strlen(a->valuestring) != strlen(b->valuestring)) return 1;
  for (a = a->child, b = b->child; a && b; a = a->next, b = b->next, index++) {
    size_t end = path_append(path, cap, at, a, index);
    int found;
    if (a->string && strlen(a->string) != strlen(b->string)) return 2;
    found = find_nul(a, b, path, cap, end);
    if (found) return found;
  }
  path[at] = '\0';
  return 0;
}

/* Explains which string of `root` holds a NUL (see plugin_parse_request). */
static VooduStatus refuse_nul(const cJSON *root, const uint8_t *request, size_t len, const char *call,
                              char *why, size_t why_cap) {
  static const char spec_prefix[] = "block.spec";
  const size_t prefix_len = sizeof spec_prefix - 1;
  char path[256] = "";
  const char *place;
  char *copy = (char *)malloc(len);
  cJSON *twin = NULL;
  int found, in_spec;
  if (copy) {
    memcpy(copy, request, len);
    nul_escapes(request, len, copy);
    twin = cJSON_ParseWithLength(copy, len);
    free(copy);
  }
  if (!twin) {
    snprintf(why, why_cap, "out of memory");
    return VOODU_STATUS_ERROR;
  }
  found = find_nul(root, twin, path, sizeof path, 0);
  cJSON_Delete(twin);
  in_spec = strncmp(path, spec_prefix, prefix_len) == 0 &&
            (path[prefix_len] == '.' || (path[prefix_len] == '\0' && found == 1));
  if (!in_spec) {
    snprintf(why, why_cap, "malformed %s request: %s%s holds a NUL character (\\u0000)", call,
             found == 2 ? "the key " : "", found ? path : "a string");
    return VOODU_STATUS_ERROR;
  }
  /* In the block: name the place as the operator wrote it. */
  place = path[prefix_len] ? path + prefix_len + 1 : "the block";
  snprintf(why, why_cap,
           "%s%s holds a NUL character (\\u0000), which this plugin cannot carry: its strings end at the first "
           "NUL — remove it",
           found == 2 ? "the key " : "", place);
  return VOODU_STATUS_REFUSED;
}

cJSON *plugin_parse_request(const uint8_t *request, size_t len, const char *call, VooduStatus *status,
                            char *why, size_t why_cap) {
  const char *end = NULL;
  cJSON *root;
  size_t i, length;
  *status = VOODU_STATUS_ERROR;
  /* cJSON reads raw control characters as spaces and copies bytes that are
   * not UTF-8 into its strings; JSON allows neither. */
  for (i = 0; i < len; i += length) {
    length = utf8_length(request + i, len - i);
    if (request[i] < 0x20 && request[i] != '\t' && request[i] != '\n' && request[i] != '\r') {
      snprintf(why, why_cap, "malformed %s request: a raw control character (0x%02x) at byte %zu", call,
               (unsigned)request[i], i);
      return NULL;
    }
    if (length == 0) {
      snprintf(why, why_cap, "malformed %s request: bytes that are not UTF-8 at byte %zu", call, i);
      return NULL;
    }
  }
  root = cJSON_ParseWithLengthOpts((const char *)request, len, &end, 0);
  if (!root) {
    snprintf(why, why_cap, "malformed %s request: not JSON at byte %zu of %zu", call,
             end ? (size_t)(end - (const char *)request) : (size_t)0, len);
    return NULL;
  }
  for (i = (size_t)(end - (const char *)request); i < len; i++) {
    if (request[i] != ' ' && request[i] != '\t' && request[i] != '\n' && request[i] != '\r') {
      snprintf(why, why_cap, "malformed %s request: something follows the JSON value, at byte %zu", call, i);
      cJSON_Delete(root);
      return NULL;
    }
  }
  if (nul_escapes(request, len, NULL) > 0) {
    *status = refuse_nul(root, request, len, call, why, why_cap);
    cJSON_Delete(root);
    return NULL;
  }
  *status = VOODU_STATUS_OK;
  return root;
}

/* plugin_check_numbers, for the value whose path is `path[0..at)`. */
static int check_numbers(const cJSON *value, char *path, size_t cap, size_t at, char *why, size_t why_cap) {
  const cJSON *child;
  size_t index = 0;
  if (cJSON_IsNumber(value)) {
    const char *place = at ? path : "the value";
    double number = value->valuedouble;
    char *text, *text_end = NULL;
    int exact;
    /* Below 10^15 cJSON writes an integer's every digit, and no exponent. */
    if (!(number > -1e15 && number < 1e15)) {
      snprintf(why, why_cap,
               "%s is beyond ±10^15, which this plugin cannot carry exactly (cJSON keeps numbers as doubles) — "
               "write it as a string",
               place);
      return 0;
    }
    text = cJSON_PrintUnformatted(value);
    if (!text) {
      snprintf(why, why_cap, "out of memory");
      return 0;
    }
    exact = strtod(text, &text_end) == number && *text_end == '\0';
    if (!exact) {
      snprintf(why, why_cap, "%s would come back from cJSON as %s, not exactly as written — write it as a string",
               place, text);
    }
    cJSON_free(text);
    if (!exact) return 0;
  }
  for (child = value->child; child; child = child->next, index++) {
    if (!check_numbers(child, path, cap, path_append(path, cap, at, child, index), why, why_cap)) return 0;
  }
  path[at] = '\0';
  return 1;
}

int plugin_check_numbers(const cJSON *value, char *why, size_t why_cap) {
  char path[256] = "";
  return check_numbers(value, path, sizeof path, 0, why, why_cap);
}

VooduStatus plugin_reply(VooduBuffer *out, VooduStatus status, cJSON *reply) {
  char *text = reply ? cJSON_PrintUnformatted(reply) : NULL;
  cJSON_Delete(reply);
  if (!text) return VOODU_STATUS_ERROR;
  out->ptr = (uint8_t *)text;
  out->len = strlen(text);
  return status;
}

VooduStatus plugin_fail(VooduBuffer *out, VooduStatus status, const char *message) {
  return plugin_refuse_at(out, status, NULL, message);
}

VooduStatus plugin_refuse_at(VooduBuffer *out, VooduStatus status, const char *pointer,
                             const char *message) {
  size_t len = strlen(message), i, length;
  char *clean = (char *)malloc(len + 1);
  cJSON *reply = cJSON_CreateObject();
  if (clean && reply) {
    for (i = 0; i < len; i += length) {
      length = utf8_length((const unsigned char *)message + i, len - i);
      if (length == 0) {
        clean[i] = '?';
        length = 1;
      } else {
        memcpy(clean + i, message + i, length);
      }
    }
    clean[len] = '\0';
    if (cJSON_AddStringToObject(reply, "message", clean) &&
        (!pointer || cJSON_AddStringToObject(reply, "pointer", pointer))) {
      free(clean);
      return plugin_reply(out, status, reply);
    }
  }
  free(clean);
  cJSON_Delete(reply);
  return VOODU_STATUS_ERROR;
}
