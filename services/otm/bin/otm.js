#!/usr/bin/env node
// The `otm` command. Built by `tsc -b` (npm ci runs it through the root `prepare` script).
import { main } from '../dist/cli.js';

main(process.argv.slice(2)).then(
  (code) => {
    if (typeof code === 'number') process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`otm: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  },
);
