/*
 * Talking to HAProxy: one command per connection to its master socket (to
 * reload) or its runtime socket (to drain a server and read its sessions).
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "haproxy.h"

/* Sends one command to a unix socket. With `answer`, reads the whole answer
 * into it, and a failed read is an error; without, the answer is read and
 * dropped, whatever happens (a reloading master may drop the connection).
 * Returns 1 on success, -1 when nothing listens there (HAProxy is not
 * running), and 0 with an explanation in `error` on any other failure. */
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
  if (answer && got < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      snprintf(error, error_cap, "HAProxy at %.80s did not answer within %ld s", path, (long)timeout.tv_sec);
    } else {
      snprintf(error, error_cap, "cannot read HAProxy's answer at %.80s: %s", path, strerror(errno));
    }
    close(fd);
    return 0;
  }
  close(fd);
  if (answer && answer->failed) {
    snprintf(error, error_cap, "out of memory");
    return 0;
  }
  return 1;
}

int haproxy_reload(const char *master_socket, char *error, size_t error_cap) {
  return socket_command(master_socket, "reload\n", NULL, error, error_cap);
}

/* Reads the current sessions of `backend/server` from a `show stat` CSV
 * (`csv`, NUL-terminated): 1 with *sessions set (0 when the server is not
 * listed), or 0 with the reason in `error` when `csv` is not that CSV. */
static int current_sessions(const char *csv, const char *backend, const char *server, long *sessions,
                            const char *path, char *error, size_t error_cap) {
  static const char header[] = "# pxname,svname,qcur,qmax,scur,";
  size_t backend_len = strlen(backend), server_len = strlen(server);
  const char *line = csv;
  if (!*csv) {
    snprintf(error, error_cap, "HAProxy at %.80s answered show stat with nothing", path);
    return 0;
  }
  if (strncmp(csv, header, sizeof header - 1) != 0) {
    size_t shown = strcspn(csv, "\r\n"); /* its first line, if any */
    snprintf(error, error_cap, "HAProxy at %.80s did not answer show stat with its statistics: \"%.*s\"", path,
             (int)(shown < 60 ? shown : 60), csv);
    return 0;
  }
  *sessions = 0;
  while (line && *line) {
    const char *next = strchr(line, '\n');
    if (strncmp(line, backend, backend_len) == 0 && line[backend_len] == ',' &&
        strncmp(line + backend_len + 1, server, server_len) == 0 && line[backend_len + 1 + server_len] == ',') {
      /* pxname,svname,qcur,qmax,scur,... */
      const char *field = line;
      char *end = NULL;
      int column;
      for (column = 0; column < 4 && field; column++) {
        field = strchr(field, ',');
        if (field) field++;
      }
      if (field) *sessions = strtol(field, &end, 10);
      if (!field || end == field || *end != ',') {
        snprintf(error, error_cap, "HAProxy at %.80s listed %.60s/%.60s without its current sessions", path,
                 backend, server);
        return 0;
      }
      return 1;
    }
    line = next ? next + 1 : NULL;
  }
  return 1;
}

int haproxy_drain_server(const char *runtime_socket, const char *backend, const char *server, long *sessions,
                         char *error, size_t error_cap) {
  Buf command = {NULL, 0, 0, 0};
  Buf stats = {NULL, 0, 0, 0};
  int ok;
  buf_str(&command, "set server ");
  buf_str(&command, backend);
  buf_str(&command, "/");
  buf_str(&command, server);
  buf_str(&command, " state drain\n");
  if (command.failed) {
    snprintf(error, error_cap, "out of memory");
    ok = 0;
  } else {
    ok = socket_command(runtime_socket, command.data, NULL, error, error_cap) == 1 &&
         socket_command(runtime_socket, "show stat\n", &stats, error, error_cap) == 1 &&
         current_sessions(stats.data ? stats.data : "", backend, server, sessions, runtime_socket, error, error_cap);
  }
  free(command.data);
  free(stats.data);
  return ok;
}

/* One server HAProxy has: its name, address and port, pointing into the
 * answer they were read from. */
typedef struct Server {
  const char *name;
  size_t name_len;
  const char *addr;
  size_t addr_len;
  const char *port;
  size_t port_len;
} Server;

/* The index of `name` among the space-separated names of `header` (after
 * its "# "), or -1. */
static int column_of(const char *header, const char *name) {
  const char *field = header + 2;
  size_t name_len = strlen(name);
  int column = 0;
  while (*field && *field != '\n') {
    size_t len = strcspn(field, " \n");
    if (len == name_len && strncmp(field, name, len) == 0) return column;
    field += len;
    while (*field == ' ') field++;
    column++;
  }
  return -1;
}

/* The `column`th space-separated field of `line`, with its length. */
static const char *field_of(const char *line, int column, size_t *len) {
  const char *field = line;
  int at;
  for (at = 0; at < column; at++) {
    field += strcspn(field, " \n");
    if (*field != ' ') return NULL;
    while (*field == ' ') field++;
  }
  *len = strcspn(field, " \n");
  return *len ? field : NULL;
}

/* Reads the servers of `backend` from `show servers state` (`answer`) into
 * `servers` (room for `cap`); their count, or -1 when the answer is not
 * that table. */
static int parse_servers(const char *answer, Server *servers, int cap) {
  const char *header = strstr(answer, "# be_id ");
  const char *line;
  int name_col, addr_col, port_col, count = 0;
  if (!header) return -1;
  name_col = column_of(header, "srv_name");
  addr_col = column_of(header, "srv_addr");
  port_col = column_of(header, "srv_port");
  if (name_col < 0 || addr_col < 0 || port_col < 0) return -1;
  line = strchr(header, '\n');
  while (line && *++line) {
    Server server;
    if (*line != '#' && *line != '\n') {
      server.name = field_of(line, name_col, &server.name_len);
      server.addr = field_of(line, addr_col, &server.addr_len);
      server.port = field_of(line, port_col, &server.port_len);
      if (server.name && server.addr && server.port) {
        if (count == cap) return -1;
        servers[count++] = server;
      }
    }
    line = strchr(line, '\n');
  }
  return count;
}

/* Splits `address` ("IP:port" or "[IPv6]:port") into `ip` and `port`; 0
 * when it is not an IP address and a port (a DNS name, say). */
static int split_ip_port(const char *address, char *ip, size_t ip_cap, char *port, size_t port_cap) {
  const char *colon = strrchr(address, ':');
  const char *start = address;
  size_t ip_len;
  unsigned char parsed[16];
  if (!colon || !colon[1] || strlen(colon + 1) >= port_cap) return 0;
  ip_len = (size_t)(colon - address);
  if (*start == '[' && ip_len >= 2 && colon[-1] == ']') {
    start++;
    ip_len -= 2;
  }
  if (ip_len == 0 || ip_len >= ip_cap) return 0;
  memcpy(ip, start, ip_len);
  ip[ip_len] = '\0';
  strcpy(port, colon + 1);
  if (strspn(port, "0123456789") != strlen(port)) return 0;
  return inet_pton(AF_INET, ip, parsed) == 1 || inet_pton(AF_INET6, ip, parsed) == 1;
}

/* Sends `command` (built in `text`) to the runtime socket; 1 when the
 * answer contains `expect` (or, with `expect` NULL, is empty or names no
 * failure), else 0 with HAProxy's answer in `error`. */
static int runtime_command(const char *runtime_socket, Buf *text, const char *expect, char *error, size_t error_cap) {
  Buf answer = {NULL, 0, 0, 0};
  const char *said;
  int ok;
  buf_str(text, "\n");
  if (text->failed) {
    snprintf(error, error_cap, "out of memory");
    free(text->data);
    return 0;
  }
  ok = socket_command(runtime_socket, text->data, &answer, error, error_cap) == 1;
  said = answer.data ? answer.data : "";
  if (ok) {
    ok = expect ? strstr(said, expect) != NULL
                : !(strstr(said, "No such") || strstr(said, "Require") || strstr(said, "not ") ||
                    strstr(said, "nvalid") || strstr(said, "rror"));
    if (!ok) {
      size_t shown = strcspn(said, "\r\n");
      snprintf(error, error_cap, "HAProxy answered \"%.*s\" to %.80s", (int)(shown < 100 ? shown : 100), said,
               text->data);
    }
  }
  free(text->data);
  free(answer.data);
  text->data = NULL;
  text->len = text->cap = 0;
  return ok;
}

/* `verb backend/server rest`, as a command in `text`. */
static void server_command(Buf *text, const char *verb, const char *backend, const char *server, size_t server_len,
                           const char *rest) {
  buf_str(text, verb);
  buf_str(text, " ");
  buf_str(text, backend);
  buf_str(text, "/");
  buf_put(text, server, server_len);
  buf_str(text, rest);
}

#define MAX_SERVERS 4096

int haproxy_sync_servers(const char *runtime_socket, const char *backend, const cJSON *endpoints, char *error,
                         size_t error_cap) {
  Buf command = {NULL, 0, 0, 0};
  Buf state = {NULL, 0, 0, 0};
  Server *servers;
  const cJSON *entry;
  int count, i, ok = 1;
  char ip[64], port[16];
  /* Every address must be one the runtime API takes. */
  cJSON_ArrayForEach(entry, endpoints) {
    const char *address = string_member(entry, "address");
    if (address && !split_ip_port(address, ip, sizeof ip, port, sizeof port)) {
      snprintf(error, error_cap, "%.60s is not an IP address and port", address);
      return 0;
    }
  }
  buf_str(&command, "show servers state ");
  buf_str(&command, backend);
  buf_str(&command, "\n");
  if (command.failed || socket_command(runtime_socket, command.data, &state, error, error_cap) != 1) {
    if (command.failed) snprintf(error, error_cap, "out of memory");
    free(command.data);
    free(state.data);
    return 0;
  }
  free(command.data);
  command.data = NULL;
  command.len = command.cap = 0;
  servers = (Server *)malloc(sizeof *servers * MAX_SERVERS);
  count = servers && state.data ? parse_servers(state.data, servers, MAX_SERVERS) : -1;
  if (count < 0) {
    snprintf(error, error_cap, "HAProxy did not answer show servers state %.60s with its servers", backend);
    free(servers);
    free(state.data);
    return 0;
  }
  /* New replicas are added and enabled; moved ones get their address. */
  cJSON_ArrayForEach(entry, endpoints) {
    const char *name = string_member(entry, "replica_id");
    const char *address = string_member(entry, "address");
    const Server *found = NULL;
    if (!ok || !name || !address || !split_ip_port(address, ip, sizeof ip, port, sizeof port)) continue;
    for (i = 0; i < count; i++) {
      if (servers[i].name_len == strlen(name) && strncmp(servers[i].name, name, servers[i].name_len) == 0) {
        found = &servers[i];
        break;
      }
    }
    if (!found) {
      server_command(&command, "add server", backend, name, strlen(name), " ");
      buf_str(&command, address);
      ok = runtime_command(runtime_socket, &command, "New server registered", error, error_cap);
      if (ok) {
        server_command(&command, "enable server", backend, name, strlen(name), "");
        ok = runtime_command(runtime_socket, &command, NULL, error, error_cap);
      }
    } else if (found->addr_len != strlen(ip) || strncmp(found->addr, ip, found->addr_len) != 0 ||
               found->port_len != strlen(port) || strncmp(found->port, port, found->port_len) != 0) {
      server_command(&command, "set server", backend, name, strlen(name), " addr ");
      buf_str(&command, ip);
      buf_str(&command, " port ");
      buf_str(&command, port);
      ok = runtime_command(runtime_socket, &command, NULL, error, error_cap);
    }
  }
  /* Gone replicas are put in maintenance, then deleted once idle. */
  for (i = 0; ok && i < count; i++) {
    int wanted = 0;
    cJSON_ArrayForEach(entry, endpoints) {
      const char *name = string_member(entry, "replica_id");
      if (name && servers[i].name_len == strlen(name) && strncmp(servers[i].name, name, servers[i].name_len) == 0)
        wanted = 1;
    }
    if (wanted) continue;
    server_command(&command, "set server", backend, servers[i].name, servers[i].name_len, " state maint");
    ok = runtime_command(runtime_socket, &command, NULL, error, error_cap);
    if (ok) {
      char ignored[256];
      /* Still busy: it stays in maintenance until a later publish. */
      server_command(&command, "del server", backend, servers[i].name, servers[i].name_len, "");
      runtime_command(runtime_socket, &command, "Server deleted", ignored, sizeof ignored);
    }
  }
  free(servers);
  free(state.data);
  return ok;
}

int haproxy_held_connections(const VooduHostApi *host, const char *pid_file, const char *address,
                             long *connections, char *error, size_t error_cap) {
  FILE *file = fopen(pid_file, "r");
  long pid = 0;
  uint64_t count = 0;
  int read;
  if (!file) {
    snprintf(error, error_cap, "cannot read HAProxy's pid file %.120s: %s — is HAProxy running with it?", pid_file,
             strerror(errno));
    return 0;
  }
  read = fscanf(file, "%ld", &pid);
  fclose(file);
  if (read != 1 || pid <= 0 || pid > 2147483647L) {
    snprintf(error, error_cap, "HAProxy's pid file %.120s holds no pid", pid_file);
    return 0;
  }
  if (!plugin_connections(host, address, (int32_t)pid, &count, error, error_cap)) return 0;
  *connections = (long)count;
  return 1;
}
