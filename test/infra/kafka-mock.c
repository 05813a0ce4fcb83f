/*
 * kafka-mock: a Kafka cluster for integration tests, from librdkafka's built-in mock cluster.
 *
 * Needs librdkafka >= 1.4 with rdkafka_mock.h (Debian 12: librdkafka-dev 2.0.2, tested with it).
 * The mock speaks the Kafka wire protocol on random loopback TCP ports; it is not a real broker
 * (no CreateTopics/DeleteTopics admin API, controller id 0 while brokers are numbered from 1, no
 * idempotent producer, no ListGroups/DescribeGroups). See test/infra/README.md.
 *
 * Build: gcc -O2 -Wall -o kafka-mock kafka-mock.c -lrdkafka
 * Usage: kafka-mock <brokers> [topic:partitions ...]
 * Prints one line "BOOTSTRAP host:port,host:port,..." on stdout once the cluster and topics
 * exist, then runs until SIGTERM/SIGINT/SIGHUP (or until its parent process dies), destroys the
 * cluster and exits 0. Errors go to stderr with exit code 2 (usage) or 1 (librdkafka).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#if !defined(RD_KAFKA_VERSION) || RD_KAFKA_VERSION < 0x010400ff
#error "kafka-mock needs librdkafka >= 1.4 (rdkafka_mock.h); Debian: apt-get install -y librdkafka-dev"
#endif

static int parse_int(const char *s, int min, int max, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return -1;
  *out = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  int brokers = 0;
  if (argc < 2 || parse_int(argv[1], 1, 16, &brokers) != 0) {
    fprintf(stderr, "usage: %s <brokers 1..16> [topic:partitions ...]\n", argv[0]);
    return 2;
  }

  /* Stop when the parent (the test runner) dies, even if it could not clean up. */
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() == 1) return 0;

  /* Block the stop signals before librdkafka starts its threads, so they inherit the mask and
   * only sigwait() below receives them. */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);

  char errstr[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  /* Keep the owning client quiet: it never connects to anything. */
  if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
    fprintf(stderr, "kafka-mock: %s\n", errstr);
    return 1;
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
  if (!rk) {
    fprintf(stderr, "kafka-mock: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
  if (!mc) {
    fprintf(stderr, "kafka-mock: rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return 1;
  }

  int replication = brokers < 3 ? brokers : 3;
  for (int i = 2; i < argc; i++) {
    char *arg = argv[i];
    char *colon = strrchr(arg, ':');
    int partitions = 0;
    if (!colon || colon == arg || parse_int(colon + 1, 1, 10000, &partitions) != 0) {
      fprintf(stderr, "kafka-mock: bad topic spec '%s' (want name:partitions)\n", arg);
      rd_kafka_mock_cluster_destroy(mc);
      rd_kafka_destroy(rk);
      return 2;
    }
    *colon = '\0';
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, arg, partitions, replication);
    if (err) {
      fprintf(stderr, "kafka-mock: topic %s: %s\n", arg, rd_kafka_err2str(err));
      rd_kafka_mock_cluster_destroy(mc);
      rd_kafka_destroy(rk);
      return 1;
    }
  }

  printf("BOOTSTRAP %s\n", rd_kafka_mock_cluster_bootstraps(mc));
  fflush(stdout);

  int sig = 0;
  while (sigwait(&stop, &sig) != 0) {
  }

  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return 0;
}
