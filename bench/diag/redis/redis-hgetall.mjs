/**
 * The Redis read of a distributed GET, alone: HGETALL of a hash holding one 3.5 KB version, by 50
 * concurrent callers, through ioredis with and without auto-pipelining, as strings and as Buffers,
 * and with and without ioredis's `commandTimeout` (a timer per command). Prints the CPU of this
 * process per command and the commands a second. Uses database 9 of the Redis at 127.0.0.1:6379
 * (or OTM_DIAG_REDIS_URL) and empties it at the end.
 *
 *   node bench/diag/redis/redis-hgetall.mjs [commands=100000] [rounds=2]
 */
import { Redis } from 'ioredis';

const N = Number(process.argv[2] ?? 100_000);
const ROUNDS = Number(process.argv[3] ?? 2);
const url = process.env.OTM_DIAG_REDIS_URL ?? 'redis://127.0.0.1:6379/9';
const value = `1700000000000 1700000000001\n${JSON.stringify({ x: 'y'.repeat(3500) })}`;
const variants = [
  ['strings, auto-pipelining, timeout', { enableAutoPipelining: true, commandTimeout: 5000 }, 'hgetall'],
  ['strings, timeout', { commandTimeout: 5000 }, 'hgetall'],
  ['Buffers, auto-pipelining, timeout', { enableAutoPipelining: true, commandTimeout: 5000 }, 'hgetallBuffer'],
  ['Buffers, timeout', { commandTimeout: 5000 }, 'hgetallBuffer'],
  ['Buffers', {}, 'hgetallBuffer'],
];

const setup = new Redis(url);
try {
  await setup.hset('otm-diag-hgetall', '4', value);
  for (let round = 1; round <= ROUNDS; round++) {
    console.log(`round ${round}: ${N} commands, 50 concurrent callers`);
    for (const [name, opts, command] of variants) {
      const r = new Redis(url, { maxRetriesPerRequest: 1, ...opts });
      let left = N;
      const caller = async () => {
        while (left-- > 0) {
          const v = await r[command]('otm-diag-hgetall');
          if (!v['4']) throw new Error('the value is missing');
        }
      };
      await Promise.all(Array.from({ length: 50 }, caller)); // warm-up
      left = N;
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await Promise.all(Array.from({ length: 50 }, caller));
      const cpu = process.cpuUsage(cpu0);
      const ms = performance.now() - t0;
      console.log(
        `  ${name.padEnd(36)} ${((cpu.user + cpu.system) / N).toFixed(1)} µs of CPU a command, ${Math.round((N * 1000) / ms)} commands/s`,
      );
      r.disconnect();
    }
  }
} finally {
  await setup.flushdb();
  setup.disconnect();
}
