/**
 * The module a bulk checking thread runs (see bulk-checker.ts): `checkBulk` on the bodies the
 * event loop hands it. Every validator is compiled when the thread starts, not on its first body.
 */
import { precompile } from '@otm/model';
import { checkBulk } from './bulk-check.js';

precompile();

export default checkBulk;
