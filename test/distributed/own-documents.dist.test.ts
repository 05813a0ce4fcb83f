/** services/otm/test/own-documents.test.ts, run again against the distributed deployment (see inject.ts). */
import { describe, it } from 'vitest';
import { integrationEnabled } from '../infra/services.js';

(globalThis as { __OTM_TEST_TARGET__?: string }).__OTM_TEST_TARGET__ = 'distributed';
if (integrationEnabled('own-documents suite on the distributed deployment')) {
  await import('../../services/otm/test/own-documents.test.js');
} else {
  describe.skip('own-documents suite on the distributed deployment (OTM_SKIP_INTEGRATION=1)', () => it('skipped on request', () => {}));
}
