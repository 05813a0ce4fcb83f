/** The event log's metrics, on the process's shared registry (GET /metrics). */
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { registry } from '@otm/core';
import { doc, lastSegment, put, useTempStores, value } from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

describe('event log metrics', () => {
  it('says at GET /metrics how big the log is and how it writes', async () => {
    const dir = tmp();
    const s = openAt(dir);
    const writes = await value('otm_event_log_writes_total');
    const records = await value('otm_event_log_records_total');
    await Promise.all([s.events.write([put('a', doc(1)), put('b', doc(2))]), s.events.write([put('c', doc(3))])]);
    expect(await value('otm_event_log_records_total')).toBe(records + 3);
    expect(await value('otm_event_log_writes_total')).toBeGreaterThan(writes);
    expect(await value('otm_event_log_bytes')).toBe(fs.statSync(lastSegment(dir)).size);
    await closeIt(s);
    openAt(dir);
    expect(await value('otm_event_log_bytes')).toBe(fs.statSync(lastSegment(dir)).size);
  });

  it('are on the shared registry that GET /metrics answers from', async () => {
    const text = await registry.metrics();
    for (const name of [
      'otm_event_log_bytes',
      'otm_event_log_writes_total',
      'otm_event_log_records_total',
      'otm_event_log_compactions_total',
      'otm_event_log_reclaimed_bytes_total',
      'otm_event_index_behind',
      'otm_event_index_failed',
    ]) {
      expect(text).toMatch(new RegExp(`^# TYPE ${name} (counter|gauge)$`, 'm'));
    }
  });
});
