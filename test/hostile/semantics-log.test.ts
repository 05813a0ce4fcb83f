/**
 * A dropped effect (an update or association event that cannot be applied) is logged with a
 * bounded summary: the event's id and the reasons are client-supplied and may be of any length.
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { applyChanges, createLogger, TOPICS, type EntityTx, type Envelope } from '@otm/core';

/** A unit of work on nothing: every entity is unknown. */
const emptyTx: EntityTx = {
  get: async () => undefined,
  put: () => {},
  delete: () => {},
  holders: async () => [],
  addHolder: () => {},
  removeHolder: () => {},
  pending: async () => [],
  addPending: () => {},
  removePending: () => {},
  listRecords: async (_tenant, refs) => refs.map(() => undefined),
  setListRecord: () => {},
  list: async () => [],
};

describe('the log line of a dropped effect', () => {
  it('holds at most a few hundred characters of client text, however long the event id', async () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    });
    const logger = createLogger('warn', sink);
    const huge = 'x'.repeat(100_000);
    // An updateEvent without the entity it changes: dropped as 'badTarget'.
    const envelope: Envelope = {
      topic: TOPICS.entities,
      key: 'k',
      message: { v: 1, op: 'put', tenant: 't', kind: 'events', key: 'k', acceptedAt: 1, doc: { eventType: 'updateEvent', id: huge } },
    };
    await applyChanges(emptyTx, [envelope], { logger });
    await new Promise((r) => setImmediate(r));
    const dropped = lines.filter((l) => l.includes('effect dropped'));
    expect(dropped).toHaveLength(1);
    expect(dropped[0]!.length).toBeLessThan(1_000);
  });
});
