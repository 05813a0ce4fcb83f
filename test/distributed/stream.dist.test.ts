/**
 * services/otm/test/stream.test.ts, run again against the distributed deployment: the stream is
 * served by the query process from the Redis change feed, tickets are given by the ingress (it
 * takes the POSTs) and taken by the query process (services/otm/test/sse.ts starts the cluster).
 */
import { describe } from 'vitest';
import { integrationEnabled } from '../infra/services.js';

const suite = 'stream suite on the distributed deployment';
describe.skipIf(!integrationEnabled(suite))(suite, async () => {
  await import('../../services/otm/test/stream.test.js');
});
