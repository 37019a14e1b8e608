/*
 * http-server: a tiny HTTP/1.0 server for readiness probes. Listens on 0.0.0.0:$HTTP_PORT (default 8080)
 * and answers GET (and HEAD) on any path with 200 and body "ok <hostname>\n"; other methods get 405.
 * Every response carries Content-Length and Connection: close. One connection at a time, each bounded by
 * a 5 s socket timeout. Prints one startup line, exits 0 on SIGTERM/SIGINT.
 * Built with `gcc -static -O2 -s`; uses no name resolution (gethostname is the uname syscall).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) {
  (void)sig;
  stop = 1;
}

static int env_port(const char *name, int def) {
  const char *v = getenv(name);
  if (v == NULL || *v == '\0')
    return def;
  char *end;
  long p = strtol(v, &end, 10);
  if (*end != '\0' || p < 1 || p > 65535) {
    fprintf(stderr, "http-server: invalid %s=%s\n", name, v);
    exit(2);
  }
  return (int)p;
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR && !stop)
        continue;
      return;
    }
    p += w;
    n -= (size_t)w;
  }
}

static void serve(int c, const char *body) {
  struct timeval tv = {5, 0};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);

  /* Read until the end of the request head (blank line), EOF, timeout, or a full buffer. */
  char req[4096];
  size_t len = 0;
  while (len < sizeof req - 1) {
    ssize_t n = read(c, req + len, sizeof req - 1 - len);
    if (n < 0 && errno == EINTR && !stop)
      continue;
    if (n <= 0)
      break;
    len += (size_t)n;
    req[len] = '\0';
    if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
      break;
  }
  req[len] = '\0';
  if (len == 0)
    return;

  int head = strncmp(req, "HEAD ", 5) == 0;
  int get = strncmp(req, "GET ", 4) == 0;
  const char *status = (get || head) ? "200 OK" : "405 Method Not Allowed";
  const char *b = (get || head) ? body : "method not allowed\n";
  char hdr[256];
  int hl = snprintf(hdr, sizeof hdr,
                    "HTTP/1.0 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                    status, strlen(b));
  write_all(c, hdr, (size_t)hl);
  if (!head)
    write_all(c, b, strlen(b));
  shutdown(c, SHUT_WR);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int port = env_port("HTTP_PORT", 8080);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop; /* no SA_RESTART: accept() returns EINTR on SIGTERM */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  char host[256];
  if (gethostname(host, sizeof host) < 0)
    strcpy(host, "unknown");
  host[sizeof host - 1] = '\0';
  char body[300];
  snprintf(body, sizeof body, "ok %s\n", host);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    perror("http-server: socket");
    return 1;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons((unsigned short)port);
  if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
    perror("http-server: bind");
    return 1;
  }
  if (listen(fd, 64) < 0) {
    perror("http-server: listen");
    return 1;
  }
  printf("http-server listening on 0.0.0.0:%d (host %s)\n", port, host);

  while (!stop) {
    int c = accept(fd, NULL, NULL);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      perror("http-server: accept");
      return 1;
    }
    serve(c, body);
    close(c);
  }
  close(fd);
  printf("http-server: stopping\n");
  return 0;
}
