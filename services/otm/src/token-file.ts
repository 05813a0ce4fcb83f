/**
 * With OTM_TOKENS unset, `otm serve` makes one read+write token for the tenant `default`, keeps it
 * in `<dataDir>/token` (mode 0600, in OTM_TOKENS syntax) and uses it again on the next start.
 */
import fs from 'node:fs';
import path from 'node:path';
import { generateToken, parseTokens, type TokenEntry } from '@otm/core';

export interface KeptToken {
  readonly entries: TokenEntry[];
  readonly token: string;
  readonly file: string;
  readonly created: boolean;
}

export function keptToken(dataDir: string): KeptToken {
  const file = path.join(dataDir, 'token');
  fs.mkdirSync(dataDir, { recursive: true });
  let line: string;
  let created = false;
  try {
    line = fs.readFileSync(file, 'utf8').trim();
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    line = `${generateToken()}:default:read+write`;
    fs.writeFileSync(file, `${line}\n`, { mode: 0o600, flag: 'wx' });
    created = true;
  }
  const entries = parseTokens(line);
  return { entries, token: line.split(':')[0]!, file, created };
}
