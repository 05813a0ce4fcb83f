/**
 * Group `validate`: the model's validation cost against `JSON.parse` of the same body, from the
 * output of bench/validate-bench.mjs (run in a process of its own), for the model's trip example
 * and the typical trip. Target: validation at most the parse's time.
 */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { REPO, log } from '../lib/util.mjs';

const run = promisify(execFile);
export const VALIDATE_BENCH = path.join(REPO, 'bench/validate-bench.mjs');

export async function validate(ctx) {
  log(`\n== validation cost (${path.relative(REPO, VALIDATE_BENCH)})`);
  const { stdout } = await run(process.execPath, [VALIDATE_BENCH], { cwd: REPO, maxBuffer: 1 << 24 });
  for (const name of ['trip', 'typical-trip (own)']) {
    const line = stdout.split('\n').find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}\t`));
    if (!line) {
      ctx.notRun(`validate / JSON.parse, ${name}`, '<= 1.0', 'row not found in validate-bench output');
      continue;
    }
    const cols = line.slice(name.length).trim().split(/\s+/);
    const [, bytes, parseUs, validateUs] = cols;
    ctx.addRow({
      scenario: `validate / JSON.parse: model ${name === 'trip' ? 'trip example' : 'typical trip'} (${bytes} B)`,
      figure: Number(validateUs),
      unit: 'µs',
      baseline: Number(parseUs),
      target: '<= 1.0',
    });
  }
}
