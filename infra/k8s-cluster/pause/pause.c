/* pause: the first process of every pod sandbox. It holds the pod's
 * namespaces open, reaps orphans (it is pid 1 of the pod) and exits on
 * SIGINT or SIGTERM. No registry is reachable here, so infra/k8s-cluster.sh
 * compiles it statically and imports it into the node's containerd as the
 * sandbox image instead of pulling registry.k8s.io/pause. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int signo) {
  (void)signo;
  _exit(0);
}

static void on_child(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && argv[1][0] == '-') {
    fprintf(stderr, "pause takes no arguments\n");
    return 1;
  }
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) pause();
}
