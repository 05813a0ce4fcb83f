/** services/otm/test/model-examples.test.ts, run again against the distributed deployment (see inject.ts). */
import { describe, it } from 'vitest';
import { integrationEnabled } from '../infra/services.js';

(globalThis as { __OTM_TEST_TARGET__?: string }).__OTM_TEST_TARGET__ = 'distributed';
if (integrationEnabled('model-examples suite on the distributed deployment')) {
  await import('../../services/otm/test/model-examples.test.js');
} else {
  describe.skip('model-examples suite on the distributed deployment (OTM_SKIP_INTEGRATION=1)', () => it('skipped on request', () => {}));
}
