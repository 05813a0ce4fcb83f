/** The record format: what the log refuses to encode. */
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { AdapterError, type DocumentWrite } from '@otm/core';
import { doc, lastSegment, put, useTempStores } from './helpers.js';

const { tmp, openAt } = useTempStores();

describe('event log records', () => {
  it('refuses a key longer than a record can hold with a non-retryable AdapterError, writing nothing of the call', async () => {
    const dir = tmp();
    const s = openAt(dir);
    const long: DocumentWrite = put('k'.repeat(70_000), doc(1));
    const refused = await s.events.write([put('fine', doc(2)), long]).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({ adapter: 'event-log', retryable: false, message: expect.stringMatching(/event key too long/) });
    expect(fs.statSync(lastSegment(dir)).size).toBe(0);
    expect(await s.events.get('t', 'events', 'fine')).toBeUndefined();
    await s.events.write([put('fine', doc(2))]);
    expect((await s.events.get('t', 'events', 'fine'))?.json).toBe(doc(2));
  });
});
