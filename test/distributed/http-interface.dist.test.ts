/**
 * services/otm/test/http-interface.test.ts, run again against the distributed deployment (see
 * inject.ts): this file is in the `distributed` vitest project, which provides
 * `otmTarget: 'distributed'` (vitest.config.ts), so the suite's startService() starts the cluster.
 */
import { describe } from 'vitest';
import { integrationEnabled } from '../infra/services.js';

const suite = 'http-interface suite on the distributed deployment';
// Imported inside the describe, so that on request (OTM_SKIP_INTEGRATION=1) every test of the
// suite is reported as skipped, and none of its hooks start anything.
describe.skipIf(!integrationEnabled(suite))(suite, async () => {
  await import('../../services/otm/test/http-interface.test.js');
});
