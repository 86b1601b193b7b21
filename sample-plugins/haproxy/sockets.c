/*
 * Talking to HAProxy: one command per connection to its master socket (to
 * reload) or its runtime socket (to drain a server and read its sessions).
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
