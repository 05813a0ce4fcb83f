/**
 * services/otm/test/find.test.ts, run again against the distributed deployment (see inject.ts).
 */
import { describe } from 'vitest';
import { integrationEnabled } from '../infra/services.js';

const suite = 'find suite on the distributed deployment';
describe.skipIf(!integrationEnabled(suite))(suite, async () => {
  await import('../../services/otm/test/find.test.js');
});
