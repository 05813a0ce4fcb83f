/**
 * What a worker pays to take a change message off Kafka: `decodeMessage` (packages/core/src/messages.ts)
 * against a bare `JSON.parse` of the same texts, for 5,000 location events as the ingress encodes
 * them (a TextPut of the bench's ~410-byte event), in µs of CPU a message. After `npm run build`:
 *
 *   node bench/diag/kafka/decode-message.mjs [rounds=4]
 */
import { TextPut, decodeMessage, encodeMessage } from '../../../packages/core/dist/index.js';
import { locationEvent } from '../../lib/documents.mjs';

const ROUNDS = Number(process.argv[2] ?? 4);
const texts = [];
for (let i = 0; i < 5_000; i++) {
  const id = `7c000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
  const encoded = encodeMessage(
    new TextPut({
      tenant: 'acme',
      kind: 'events',
      key: id,
      acceptedAt: Date.now(),
      text: Buffer.from(locationEvent(id, i)),
      lifecycleRank: 2,
      modified: 0,
    }),
  );
  texts.push(typeof encoded === 'string' ? encoded : encoded.toString('utf8'));
}
const cpuUs = (fn) => {
  const t0 = process.cpuUsage();
  for (let r = 0; r < 20; r++) for (const t of texts) fn(t);
  const c = process.cpuUsage(t0);
  return (c.user + c.system) / (20 * texts.length);
};
cpuUs(JSON.parse); // warm-up
cpuUs(decodeMessage);
for (let round = 1; round <= ROUNDS; round++) {
  const parse = cpuUs(JSON.parse);
  const decode = cpuUs(decodeMessage);
  console.log(
    `round ${round}: JSON.parse ${parse.toFixed(2)} µs, decodeMessage ${decode.toFixed(2)} µs a message (${(decode / parse).toFixed(2)}×)`,
  );
}
