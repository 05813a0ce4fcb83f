/** services/otm/test/http-interface.test.ts, run again against the distributed deployment (see inject.ts). */
import { describe, it } from 'vitest';
import { integrationEnabled } from '../infra/services.js';

(globalThis as { __OTM_TEST_TARGET__?: string }).__OTM_TEST_TARGET__ = 'distributed';
if (integrationEnabled('http-interface suite on the distributed deployment')) {
  await import('../../services/otm/test/http-interface.test.js');
} else {
  describe.skip('http-interface suite on the distributed deployment (OTM_SKIP_INTEGRATION=1)', () => it('skipped on request', () => {}));
}
