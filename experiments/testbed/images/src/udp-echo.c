/*
 * udp-echo: replies to every UDP datagram with the same bytes, sent back to its sender.
 * Listens on 0.0.0.0:$ECHO_PORT (default 5005), prints one startup line, exits 0 on SIGTERM/SIGINT.
 * Built with `gcc -static -O2 -s`; uses no name resolution.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
    fprintf(stderr, "udp-echo: invalid %s=%s\n", name, v);
    exit(2);
  }
  return (int)p;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int port = env_port("ECHO_PORT", 5005);

  /* No SA_RESTART: a signal interrupts recvfrom() so the loop can notice `stop`. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);

  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) {
    perror("udp-echo: socket");
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
    perror("udp-echo: bind");
    return 1;
  }
  printf("udp-echo listening on 0.0.0.0:%d/udp\n", port);

  static char buf[65536];
  while (!stop) {
    struct sockaddr_in peer;
    socklen_t plen = sizeof peer;
    ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&peer, &plen);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      perror("udp-echo: recvfrom");
      return 1;
    }
    if (sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&peer, plen) < 0 && errno != EINTR)
      perror("udp-echo: sendto"); /* e.g. ICMP-induced errors: keep serving */
  }
  close(fd);
  printf("udp-echo: stopping\n");
  return 0;
}
