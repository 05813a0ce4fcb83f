/**
 * How fast kafkajs alone produces to the test Kafka (librdkafka's mock cluster, 16 partitions),
 * with acks=-1 like the ingress: round-trip time of one produce request of 1, 50 and 200 messages
 * of 700 bytes, then messages per second with one request in flight (as the ingress sends) and
 * with two. Shows whether the mock or the producer limits the distributed PUT scenario.
 *
 *   node --import ./bench/lib/register-ts.mjs bench/diag/kafka/kafka-produce.mjs
 */
import { Kafka, logLevel } from 'kafkajs';
import { startKafka } from '../../../test/infra/services.ts';

const kafka = await startKafka({ topics: { t: 16 } });
const producer = new Kafka({ brokers: kafka.brokers, logLevel: logLevel.NOTHING }).producer({ idempotent: false });
await producer.connect();
const batch = (n, salt) => Array.from({ length: n }, (_, i) => ({ key: `vehicle-${(i + salt) % 64}`, value: 'x'.repeat(700) }));
const send = (n, salt) => producer.sendBatch({ acks: -1, topicMessages: [{ topic: 't', messages: batch(n, salt) }] });
try {
  for (const n of [1, 50, 200]) {
    const ms = [];
    for (let r = 0; r < 200; r++) {
      const t0 = performance.now();
      await send(n, r);
      ms.push(performance.now() - t0);
    }
    ms.sort((a, b) => a - b);
    console.log(`produce request of ${String(n).padStart(3)} messages: p50 ${ms[100].toFixed(2)} ms, p90 ${ms[180].toFixed(2)} ms`);
  }
  for (const inFlight of [1, 2]) {
    let sent = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: inFlight }, async (_, w) => {
        for (let r = 0; r < 400 / inFlight; r++) {
          await send(50, r + w);
          sent += 50;
        }
      }),
    );
    console.log(`${inFlight} request(s) in flight, 50 messages each: ${Math.round(sent / ((performance.now() - t0) / 1000))} messages/s`);
  }
} finally {
  await producer.disconnect();
  await kafka.stop();
}
