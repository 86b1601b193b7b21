/*
 * The haproxy sample plugin's private header: what its four files share.
 *
 *   config.c   reads and checks a block (validate's defaults, the request's target)
 *   render.c   writes the HAProxy configuration file
 *   sockets.c  talks to HAProxy's master and runtime sockets
 *   vtable.c   the plugin's members and its entry point
 *
 * Every function is internal to the shared object (the build passes
 * -fvisibility=hidden); only voodu_plugin_entry_v1 is exported. Strings are
 * NUL-terminated and owned by the struct that holds them; every `error`
 * buffer is the caller's, `error_cap` bytes, and receives one line.
 */
#ifndef VOODU_HAPROXY_H
#define VOODU_HAPROXY_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "voodu_plugin.h"
#include "../c-common/plugin_util.h"

/* ---- A growing byte buffer (render.c) -------------------------------------- */

/* Zero-initialise (`Buf b = {NULL, 0, 0, 0};`); free `data` when done. */
typedef struct Buf {
  char *data; /* NUL-terminated once anything was written; owned */
  size_t len;
  size_t cap;
  int failed; /* set when an allocation failed; the content is then unusable */
} Buf;

void buf_put(Buf *b, const char *s, size_t n);
void buf_str(Buf *b, const char *s);
void buf_uint(Buf *b, unsigned long long value);

/* ---- The block (config.c) -------------------------------------------------- */

/* A checked block body, defaults filled in. Optional members are NULL when
 * the block does not set them. */
typedef struct Spec {
  unsigned long long port;
  char *config_path;
  char *frontend;
  char *mode;
  char *runtime_socket;
  char *master_socket;
  char *network;
  char *pid_file;
} Spec;

/* The block a publish, drain or forget request is about. */
typedef struct Target {
  char *scope;
  char *name;
  char *block_type;
  char *label; /* the first label, or NULL */
  Spec spec;
  char section[160]; /* the frontend and backend name */
} Target;

/* Checks a block body (`body`, borrowed) and fills in defaults into `spec`,
 * which then owns its strings (spec_free). Returns 0 with a refusal in
 * `error`, and `spec` empty, when the body is not a valid haproxy block;
 * *option is then the option at fault (a static string), or NULL when the
 * refusal is about the block as a whole. */
int parse_spec(const cJSON *body, Spec *spec, char *error, size_t error_cap, const char **option);
void spec_free(Spec *spec);

/* parse_spec for validate, which also refuses a network other than voodu0
 * (a stored spec was checked when it was validated). */
int validate_spec(const cJSON *body, Spec *spec, char *error, size_t error_cap, const char **option);

/* The normalised spec as JSON, owned by the caller; NULL when out of memory. */
cJSON *spec_json(const Spec *spec);

/* Reads scope, name and block from a publish, drain or forget request
 * (`request`, borrowed). Returns 0 with the reason in `error`, and `t`
 * empty; otherwise `t` owns its strings until target_free. */
int read_target(const cJSON *request, Target *t, char *error, size_t error_cap);
void target_free(Target *t);

/* The string member `key` of `object` (borrowed), or NULL. */
const char *string_member(const cJSON *object, const char *key);

/* ---- The configuration file (render.c) ------------------------------------- */

/* Renders the whole configuration of `t` for `generation` with one server
 * per member of `endpoints` (a JSON array, borrowed) into `config`.
 * Returns 0 when `endpoints` is not an array. */
int render_config(const Target *t, unsigned long long generation, const cJSON *endpoints, Buf *config);

/* Writes `content` to `path` through a temporary file and a rename, so
 * HAProxy never reads half a configuration. Returns 0 with the reason. */
int write_atomically(const char *path, const Buf *content, char *error, size_t error_cap);

/* ---- HAProxy's sockets (sockets.c) ----------------------------------------- */

/* Asks the master at `master_socket` to reload HAProxy. Returns 1 when it
 * was asked, -1 when nothing listens there (HAProxy is not running yet),
 * and 0 with the reason in `error`. */
int haproxy_reload(const char *master_socket, char *error, size_t error_cap);

/* Sets server `backend/server` to DRAIN through the runtime socket and
 * reads its current sessions from `show stat` into `*sessions` (0 when
 * HAProxy does not list the server). Returns 0 with the reason in `error`
 * when HAProxy could not be asked or its answer could not be read: the
 * caller must not take that for drained. */
int haproxy_drain_server(const char *runtime_socket, const char *backend, const char *server, long *sessions,
                         char *error, size_t error_cap);

/* The connections HAProxy's processes (the master whose pid is in
 * `pid_file`, and its workers) hold to `address`, counted by the host
 * (ABI 1.3's `connections`) into *connections. Returns 0 with the reason in
 * `error` when the pid file cannot be read or the host cannot count: the
 * caller must not take that for drained. */
int haproxy_held_connections(const VooduHostApi *host, const char *pid_file, const char *address,
                             long *connections, char *error, size_t error_cap);

/* Brings the servers of `backend` in the running HAProxy to `endpoints`
 * (a publish's array, borrowed) through the runtime socket, without a
 * reload: `add server` and `enable server` for a new replica, `set server
 * addr` for one whose address changed, and `state maint` then `del server`
 * for one gone (one that still has connections stays in maintenance and is
 * deleted by a later publish). A server's drain state is left as it is.
 * Returns 1 when HAProxy has the set, 0 with the reason in `error` when the
 * runtime API cannot express it (an address that is a name, an answer it
 * did not expect): the caller reloads instead. */
int haproxy_sync_servers(const char *runtime_socket, const char *backend, const cJSON *endpoints, char *error,
                         size_t error_cap);

/* Whether two rendered configurations differ only in their server lines
 * and their generation comment: then the runtime API can bring HAProxy from
 * one to the other. */
int same_but_servers(const char *old_config, const char *new_config);

/* The whole file at `path` into `into`; 0 when it cannot be read. */
int read_file(const char *path, Buf *into);

#endif
