/** What a start does: a torn record at the tail cut off, an index behind the log rebuilt, damage elsewhere refused. */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { AdapterError } from '@otm/core';
import { openEmbeddedStores } from '../../src/index.js';
import { clearIndex, doc, lastSegment, put, segments, useTempStores } from './helpers.js';

const { tmp, openAt, closeIt } = useTempStores();

describe('event log recovery', () => {
  it('cuts a torn record off the tail at start, keeps every whole one, and goes on writing after it', async () => {
    const dir = tmp();
    const s = openAt(dir);
    for (let i = 0; i < 50; i++) await s.events.write([put(`e${i}`, doc(i))]);
    await closeIt(s);
    const file = lastSegment(dir);
    const whole = fs.statSync(file).size;
    // A record cut off by a crash: its header says 500 bytes, 20 made it to the disk.
    const torn = Buffer.alloc(28);
    torn.writeUInt32LE(500, 0);
    fs.appendFileSync(file, torn);

    const warnings: string[] = [];
    const again = openAt(dir, { warn: (m) => warnings.push(m) });
    expect(fs.statSync(file).size).toBe(whole);
    expect(warnings.join()).toMatch(/torn record.*cutting off the last 28 bytes/);
    for (let i = 0; i < 50; i++) expect((await again.events.get('t', 'events', `e${i}`))?.json).toBe(doc(i));
    await again.events.write([put('after', doc(99))]);
    await closeIt(again);
    const third = openAt(dir);
    expect((await third.events.get('t', 'events', 'after'))?.json).toBe(doc(99));
    expect((await third.events.get('t', 'events', 'e49'))?.json).toBe(doc(49));
  });

  it('cuts off a last record whose checksum does not match (a partly written body)', async () => {
    const dir = tmp();
    const s = openAt(dir);
    await s.events.write([put('a', doc(1))]);
    await s.events.write([put('b', doc(2))]);
    await closeIt(s);
    const file = lastSegment(dir);
    const size = fs.statSync(file).size;
    // Header, operation and key length, key, the time it was accepted (its document has no event
    // time of its own: record.ts), document.
    const bRecord = 8 + 3 + Buffer.byteLength('t|events|b|0') + 8 + Buffer.byteLength(doc(2));
    // Clear the index so that both records are replayed, then damage the last byte of 'b'.
    await clearIndex(dir);
    const fd = fs.openSync(file, 'r+');
    fs.writeSync(fd, Buffer.from([0x00]), 0, 1, size - 1);
    fs.closeSync(fd);
    const again = openAt(dir, { warn: () => {} });
    expect(fs.statSync(file).size).toBe(size - bRecord);
    expect((await again.events.get('t', 'events', 'a'))?.json).toBe(doc(1));
    expect(await again.events.get('t', 'events', 'b')).toBeUndefined();
  });

  it('rebuilds an index that is behind the log (lost, or not yet committed at a crash), deletes included', async () => {
    const dir = tmp();
    const s = openAt(dir);
    for (let i = 0; i < 30; i++) await s.events.write([put(`e${i}`, doc(i)), put(`e${i}`, doc(i + 1000), 3)]);
    await s.events.write([{ op: 'delete', tenant: 't', kind: 'events', key: 'e7' }]);
    await s.events.write([put('e8', doc(8888), 3)]);
    await closeIt(s);
    await clearIndex(dir);

    const again = openAt(dir);
    for (let i = 0; i < 30; i++) {
      if (i === 7) {
        expect(await again.events.get('t', 'events', 'e7')).toBeUndefined();
        expect(await again.events.get('t', 'events', 'e7', 0)).toBeUndefined();
        continue;
      }
      expect((await again.events.get('t', 'events', `e${i}`, 0))?.json).toBe(doc(i));
      expect((await again.events.get('t', 'events', `e${i}`))?.json).toBe(i === 8 ? doc(8888) : doc(i + 1000));
    }
  });

  it('refuses to start on a damaged record that is not at the end of the log', async () => {
    const dir = tmp();
    const s = openAt(dir, { eventSegmentBytes: 1024 });
    for (let i = 0; i < 40; i++) await s.events.write([put(`e${i}`, doc(i))]);
    await closeIt(s);
    await clearIndex(dir);
    const first = path.join(dir, 'events', segments(dir)[0]!);
    const fd = fs.openSync(first, 'r+');
    fs.writeSync(fd, Buffer.from('garbage!'), 0, 8, 20);
    fs.closeSync(fd);
    expect(() => openEmbeddedStores(dir, { eventSegmentBytes: 1024 })).toThrow(/not at the end of the log; the log is damaged/);
  });

  it('says a damaged log is an AdapterError that no retry mends', async () => {
    const dir = tmp();
    const s = openAt(dir, { eventSegmentBytes: 1024 });
    for (let i = 0; i < 40; i++) await s.events.write([put(`e${i}`, doc(i))]);
    await closeIt(s);
    await clearIndex(dir);
    const fd = fs.openSync(path.join(dir, 'events', segments(dir)[0]!), 'r+');
    fs.writeSync(fd, Buffer.from('garbage!'), 0, 8, 20);
    fs.closeSync(fd);
    let refused: unknown;
    try {
      openEmbeddedStores(dir, { eventSegmentBytes: 1024 });
    } catch (e) {
      refused = e;
    }
    expect(refused).toBeInstanceOf(AdapterError);
    expect(refused).toMatchObject({ adapter: 'event-log', retryable: false, message: expect.stringMatching(/the log is damaged/) });
  });
});
