/**
 * What a change's item head costs (`{"cursor","op","kind","id","lifecycle"?`, written into a batch
 * for every change delivered): core's `changeHead` (feed-item.ts) with its plain path (a cursor and an id that
 * are their own JSON) against the same head with both escaped by JSON.stringify and counted by
 * Buffer.byteLength, as before. UUID ids and numeric cursors, written into a buffer.
 *
 *   node bench/diag/webhook/change-head.mjs [heads=3000000]     # after npm run build
 */
import { LIFECYCLES, changeHead } from '../../../packages/core/dist/index.js';

const n = Number(process.argv[2] ?? 3_000_000);
const entries = Array.from({ length: 1000 }, (_, i) => ({
  cursor: String(1_000_000 + i),
  at: 0,
  op: 'put',
  kind: 'events',
  key: `7e000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycleRank: 3,
}));
const out = Buffer.allocUnsafe(1 << 16);
const escaped = (e) => {
  const head = `{"cursor":${JSON.stringify(e.cursor)},"op":"${e.op}","kind":"${e.kind}","id":${JSON.stringify(e.key)},"lifecycle":"${LIFECYCLES[e.lifecycleRank - 1]}"`;
  return out.write(head, 0, 'utf8') + Buffer.byteLength(head);
};
const plain = (e) => {
  const { head, headBytes } = changeHead(e);
  return out.write(head, 0, 'utf8') + headBytes;
};
for (let round = 1; round <= 3; round++) {
  const line = [];
  for (const [name, f] of [
    ['escaped', escaped],
    ['changeHead', plain],
  ]) {
    let sink = 0;
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) sink += f(entries[i % 1000]);
    line.push(`${name} ${(Number(process.hrtime.bigint() - t0) / n).toFixed(0)} ns${sink > 0 ? '' : '!'}`);
  }
  console.log(`round ${round}: ${line.join(', ')} a head`);
}
