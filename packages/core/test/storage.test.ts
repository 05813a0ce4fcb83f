/** Refusals for lack of room (core/storage.ts): which failures they are, the write state, and the answer. */
import { describe, expect, it } from 'vitest';
import {
  AdapterError,
  StorageRefused,
  WriteState,
  fileRefusal,
  formatBytes,
  insufficientStorage,
  registry,
  storageAnswer,
  watchDataFree,
} from '@otm/core';

const errno = (code: string, errnoNumber: number, message: string) => Object.assign(new Error(message), { code, errno: -errnoNumber });

describe('fileRefusal', () => {
  it('names the failures more room cures, as Node and LMDB give them', () => {
    expect(fileRefusal(errno('ENOSPC', 28, 'ENOSPC: no space left on device, write'))).toBe('no-space');
    expect(fileRefusal(errno('EDQUOT', 122, 'EDQUOT: disk quota exceeded, write'))).toBe('quota');
    expect(fileRefusal(errno('EFBIG', 27, 'EFBIG: file too large, write'))).toBe('no-space');
    expect(fileRefusal(errno('EIO', 5, 'EIO: i/o error, write'))).toBe('io');
    // LMDB's commitError: its code is the errno as a number, its message strerror's (a short write: EIO).
    expect(fileRefusal(Object.assign(new Error('Input/output error'), { code: 5 }))).toBe('io');
    expect(fileRefusal(Object.assign(new Error('No space left on device'), { code: 28 }))).toBe('no-space');
    expect(fileRefusal(Object.assign(new Error('MDB_MAP_FULL: Environment mapsize limit reached'), { code: -30792 }))).toBe('map-full');
    expect(fileRefusal(new Error('MDB_MAP_FULL'))).toBe('map-full');
    expect(fileRefusal(Object.assign(new Error('short write (10 of 20 bytes)'), { code: 'ESHORTWRITE' }))).toBe('short-write');
  });

  it('names nothing else', () => {
    expect(fileRefusal(errno('EACCES', 13, 'EACCES: permission denied'))).toBeUndefined();
    expect(fileRefusal(new Error('Database is closed'))).toBeUndefined();
    expect(fileRefusal(new Error('MDB_BAD_VALSIZE: Unsupported size of key/DB name/data, or wrong DUPFIXED size'))).toBeUndefined();
    expect(fileRefusal('ENOSPC')).toBeUndefined();
    expect(fileRefusal(undefined)).toBeUndefined();
  });
});

describe('WriteState', () => {
  const refusedCount = async (store: string, cause: string) =>
    (await registry.getSingleMetric('otm_writes_refused_total')!.get()).values.find(
      (v) => v.labels.store === store && v.labels.cause === cause,
    )?.value ?? 0;

  it('is down from a refusal until a write succeeds, naming the cause, the folder and its free bytes; each refusal counted', async () => {
    const free = { bytes: 12_345 };
    const state = new WriteState('test-store', { where: '/data/events', freeBytes: () => free.bytes });
    expect(state.part.name).toBe('store test-store');
    expect(state.part.kind).toBe('store');
    expect(state.refusing).toBe(false);
    const before = await refusedCount('test-store', 'no-space');
    const refusal = state.refuse('no-space', 'a write of 300 bytes: ENOSPC');
    expect(refusal).toBeInstanceOf(StorageRefused);
    expect(refusal).toBeInstanceOf(AdapterError);
    expect(refusal).toMatchObject({ adapter: 'test-store', store: 'test-store', refusal: 'no-space', retryable: true });
    expect(refusal.message).toBe('no space left on the disk in /data/events, 12.1 KiB free (a write of 300 bytes: ENOSPC)');
    expect(state.part.status()).toMatchObject({
      up: false,
      reason: 'refuses writes: no space left on the disk in /data/events (12.1 KiB free); up again once a write succeeds',
    });
    state.refuse('no-space', 'again');
    expect(await refusedCount('test-store', 'no-space')).toBe(before + 2);
    // Found by a probe: down, but no write counted.
    state.unable('io', 'a probe write failed');
    expect(await refusedCount('test-store', 'io')).toBe(0);
    expect(state.lastCause).toBe('io');
    state.ok();
    expect(state.refusing).toBe(false);
    expect(state.part.status().up).toBe(true);
    expect(state.lastCause).toBeUndefined();
  });
});

describe('the answer', () => {
  it('is a 503 with Retry-After and one insufficientStorage item naming the store and the cause', () => {
    const answer = storageAnswer(new StorageRefused('event-log', 'no-space', 'no space left on the disk in /data/events, 0 bytes free'));
    expect(answer).toMatchObject({ status: 503, code: 'insufficientStorage', retryable: true, headers: { 'retry-after': '30' } });
    expect(answer.items).toEqual([
      {
        type: 'insufficientStorage',
        message:
          'not stored: store event-log refuses writes: no space left on the disk in /data/events, 0 bytes free; nothing of this write was kept, send it again later',
      },
    ]);
    expect(insufficientStorage('full', 7).headers).toEqual({ 'retry-after': '7' });
  });

  it('gives sizes in units a person reads', () => {
    expect([0, 1023, 1024, 1536, 10 * 1024 * 1024, 300 * 1024 * 1024, 5 * 1024 ** 4].map(formatBytes)).toEqual([
      '0 bytes',
      '1023 bytes',
      '1.0 KiB',
      '1.5 KiB',
      '10.0 MiB',
      '300 MiB',
      '5.0 TiB',
    ]);
  });
});

describe('otm_data_free_bytes', () => {
  it('has a sample for the watched data folder only: none in a process without one', async () => {
    watchDataFree(undefined);
    expect(await registry.metrics()).not.toMatch(/^otm_data_free_bytes/m);
    watchDataFree({ folder: '/data', free: () => 4096 });
    expect(await registry.metrics()).toMatch(/^otm_data_free_bytes\{folder="\/data"\} 4096$/m);
    watchDataFree(undefined);
    expect(await registry.metrics()).not.toMatch(/^otm_data_free_bytes/m);
  });
});
