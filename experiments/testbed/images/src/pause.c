/*
 * pause: the sandbox ("infra") process of a test pod, modelled on Kubernetes' build/pause/linux/pause.c.
 * Sleeps forever in pause(), reaps any zombie it inherits (it runs as PID 1 of the pod), and exits 0 on
 * SIGINT or SIGTERM. Built with `gcc -static -O2 -s`.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

static void install(int sig, void (*fn)(int), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = fn;
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, NULL) < 0) {
    perror("sigaction");
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("pause (ulysses testbed) 1");
    return 0;
  }
  if (getpid() != 1)
    fprintf(stderr, "pause: warning: not running as PID 1\n");
  install(SIGINT, on_stop, 0);
  install(SIGTERM, on_stop, 0);
  install(SIGCHLD, on_child, SA_NOCLDSTOP | SA_RESTART);
  for (;;)
    pause();
  return 42; /* unreachable */
}
