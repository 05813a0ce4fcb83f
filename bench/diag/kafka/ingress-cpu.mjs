/**
 * CPU time per PUT of the distributed ingress alone: `otm ingress` on the test Kafka (librdkafka's
 * mock cluster, 16 partitions a topic, as `npm run bench` starts it), with no worker, ClickHouse or
 * query service running, under the bench's PUT load (a new location event per request, 50
 * connections) for a fixed time. Prints PUT/s and the CPU µs a PUT of the ingress and of the
 * Kafka mock, from /proc (user and system time), so that a change to the ingress or to the Kafka
 * bus can be measured apart from the rest of the pipeline. After `npm run build`:
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/kafka/ingress-cpu.mjs [seconds=10] [rounds=2]
 *
 * The ingress reads Redis (database 9 of 127.0.0.1:6379, or OTM_DIAG_REDIS_URL) only for DELETE
 * and update events, which this load does not send; the ClickHouse URL it is given is never
 * called. KAFKA_LINGER_MS is passed on to the ingress when set. OTM_CHILD_NODE_OPTIONS becomes the
 * ingress's NODE_OPTIONS (test/process.ts). Loopback only.
 */
import { TOPICS } from '../../../packages/core/dist/index.js';
import { startKafka } from '../../../test/infra/services.ts';
import { startOtm, stop } from '../../../test/process.ts';
import { locationBodies } from '../../lib/documents.mjs';
import { cpuSeconds } from '../../lib/proc.mjs';
import { fmt, load } from '../../lib/util.mjs';

const SECONDS = Number(process.argv[2] ?? 10);
const ROUNDS = Number(process.argv[3] ?? 2);
const TOKEN = 'ingress-diag-token';
const cpu = (pid) => {
  const { user, sys } = cpuSeconds(`/proc/${pid}/stat`);
  return user + sys;
};

const kafka = await startKafka({ topics: { [TOPICS.entities]: 16, [TOPICS.telemetry]: 16, [TOPICS.deadLetter]: 1 } });
const kafkaPid = kafka.pid;
const ingress = await startOtm(['ingress'], {
  OTM_BUS: 'kafka',
  KAFKA_BROKERS: kafka.brokers.join(','),
  OTM_ENTITY_STORE: 'redis',
  REDIS_URL: process.env.OTM_DIAG_REDIS_URL ?? 'redis://127.0.0.1:6379/9',
  OTM_EVENT_STORE: 'clickhouse',
  CLICKHOUSE_URL: 'http://127.0.0.1:9',
  OTM_TOKENS: `${TOKEN}:acme:read+write`,
  LOG_LEVEL: 'warn',
  ...(process.env.KAFKA_LINGER_MS ? { KAFKA_LINGER_MS: process.env.KAFKA_LINGER_MS } : {}),
});
try {
  const bodies = locationBodies();
  const put = (duration) =>
    load({ url: ingress.url, token: TOKEN, method: 'PUT', path: '/api/v5/events', bodyFn: bodies.next, duration, connections: 50 });
  await put(3); // warm-up
  for (let round = 1; round <= ROUNDS; round++) {
    const before = { ingress: cpu(ingress.child.pid), kafka: cpu(kafkaPid) };
    const r = await put(SECONDS);
    const us = (p, b) => ((cpu(p) - b) * 1e6) / r.total;
    if (r.non2xx + r.errors > 0) throw new Error(`${r.non2xx} answers not 2xx, ${r.errors} errors`);
    console.log(
      `round ${round}: ${fmt(r.rps)} PUT/s (p50 ${r.p50} ms, p99 ${r.p99} ms); CPU a PUT: ingress ${fmt(us(ingress.child.pid, before.ingress))} µs, Kafka mock ${fmt(us(kafkaPid, before.kafka))} µs`,
    );
  }
} finally {
  await stop(ingress);
  await kafka.stop();
}
