/**
 * services/otm/test/activity.test.ts, run again against the distributed deployment (see inject.ts):
 * the same day gives the same stops, drives and distance from ClickHouse as from the event log.
 */
import { describe } from 'vitest';
import { integrationEnabled } from '../infra/services.js';

const suite = 'activity suite on the distributed deployment';
describe.skipIf(!integrationEnabled(suite))(suite, async () => {
  await import('../../services/otm/test/activity.test.js');
});
