/**
 * `otm serve` on a full disk (issue 42): writes that do not fit are refused with 503, Retry-After
 * and an `insufficientStorage` item, never the process; /readyz names the store while it refuses,
 * and is green again by itself once there is room; /metrics counts the refusals and shows the
 * free bytes; a start on the full disk serves reads; every write answered 200 is readable after.
 *
 * The disk: a tmpfs of 8 MB of its own, which fills for real (LMDB and the event log both run out
 * of room); that needs root and a kernel that lets the test mount (CI runs as root on the same kind
 * of machine). Where mounting is refused, the same scenario runs with ENOSPC injected at the file
 * layer instead (the event log's writes, and the free bytes statfs reports): LMDB's own full disk is
 * then not exercised, which the suite's name says.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { createLogger, parseTokens } from '@otm/core';
import { createEmbeddedService, type EmbeddedService } from '../src/index.js';
import { canMountTmpfs, mountTmpfs } from '../../../test/tmpfs.js';
import { TOKENS, auth, json } from './helpers.js';

const canMount = canMountTmpfs();

/** A data folder on a disk the test fills and frees. */
interface Disk {
  readonly dataDir: string;
  /** Takes what room is left (or makes every write of the event log fail with ENOSPC). */
  fill(): void;
  /** Gives room back. */
  free(): void;
  close(): void;
}

function tmpfsDisk(): Disk {
  const { dir: mnt, unmount } = mountTmpfs('8m');
  const dataDir = path.join(mnt, 'data');
  fs.mkdirSync(dataDir);
  // Room the test gives back when the writes have filled the rest.
  fs.writeFileSync(path.join(mnt, 'filler-reserve'), Buffer.alloc(3 * 1024 * 1024, 1));
  let fillers = 0;
  return {
    dataDir,
    fill: () => {
      // Until the disk says no: 64 KB files, then smaller ones for the last pages.
      for (const size of [65_536, 4096]) {
        for (;;) {
          const file = path.join(mnt, `filler-${fillers++}`);
          try {
            fs.writeFileSync(file, Buffer.alloc(size, 1));
          } catch {
            fs.rmSync(file, { force: true });
            break;
          }
        }
      }
    },
    free: () => {
      for (const f of fs.readdirSync(mnt)) if (f.startsWith('filler-')) fs.rmSync(path.join(mnt, f));
    },
    close: unmount,
  };
}

function injectedDisk(): Disk {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-full-disk-'));
  let full = false;
  const enospc = () => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28 });
  const realWritev = fs.writev.bind(fs);
  const realStatfs = fs.statfsSync.bind(fs);
  vi.spyOn(fs, 'writev').mockImplementation((...args: unknown[]) => {
    const callback = args.at(-1) as (e: Error | null, n?: number) => void;
    if (full) return void process.nextTick(() => callback(enospc()));
    return (realWritev as (...a: unknown[]) => void)(...args);
  });
  vi.spyOn(fs, 'statfsSync').mockImplementation((p: fs.PathLike) => {
    const s = realStatfs(p);
    return full ? { ...s, bavail: 0, bfree: 0 } : s;
  });
  return {
    dataDir,
    fill: () => void (full = true),
    free: () => void (full = false),
    close: () => {
      vi.restoreAllMocks();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** The service's log lines (warnings and up), for what it says about the disk. */
function capturingLogger() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line !== '') lines.push((JSON.parse(line) as { msg: string }).msg);
      done();
    },
  });
  return { logger: createLogger('info', stream), lines };
}

const LOCATION = (i: number) => ({
  eventType: 'locationUpdateEvent',
  id: `5b000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  lifecycle: 'actual',
  creationDate: new Date(Date.UTC(2026, 2, 1) + i * 1000).toISOString(),
  vehicle: { associationType: 'reference', entityType: 'vehicle', uuid: `7c000000-0000-4000-8000-${String(i % 50).padStart(12, '0')}` },
  geoReference: { type: 'latLonPointGeoReference', lat: 52 + (i % 1000) / 1000, lon: 5 + (i % 997) / 1000 },
  name: `fill ${i} ${'x'.repeat(120)}`,
});
const VEHICLE = (i: number) => ({ entityType: 'vehicle', name: `vehicle ${i}`, licensePlate: `FD-${i}` });

describe(
  canMount
    ? 'otm serve on a full disk (an 8 MB tmpfs: LMDB and the event log run out of room for real)'
    : 'otm serve on a full disk (mount refused here: ENOSPC injected into the event log writes and statfs; LMDB not filled)',
  () => {
    let disk: Disk | undefined;
    let svc: EmbeddedService | undefined;
    afterEach(async () => {
      await svc?.close();
      svc = undefined;
    });
    afterAll(() => disk?.close());

    // FD_LOG=1: the service's warnings on stderr (what the stores said), to look into a failure.
    const start = async (logger = createLogger(process.env.FD_LOG === '1' ? 'warn' : 'silent')) => {
      svc = await createEmbeddedService({ dataDir: disk!.dataDir, bodyLimit: 1_048_576, maxDepth: 64 }, parseTokens(TOKENS), logger);
      await svc.app.ready();
      return svc;
    };
    const put = (s: EmbeddedService, kind: string, doc: unknown) =>
      s.app.inject({ method: 'PUT', url: `/api/v5/${kind}`, headers: { ...json, ...auth() }, payload: JSON.stringify(doc) });
    const bulk = (s: EmbeddedService, docs: unknown[]) =>
      s.app.inject({ method: 'POST', url: '/api/v5/bulk/events', headers: { ...json, ...auth() }, payload: JSON.stringify(docs) });
    const get = (s: EmbeddedService, kind: string, id: string) =>
      s.app.inject({ method: 'GET', url: `/api/v5/${kind}/${id}`, headers: auth() });

    /** Every document answered 200, by kind and id: all must be readable at the end. */
    const acknowledged = new Map<string, string>();
    let next = 0;

    /** A refusal as the issue asks: 503, Retry-After, the model's error array naming the cause. */
    const expectRefusal = (status: number, headers: Record<string, unknown>, items: Array<{ type: string; message: string }>) => {
      expect(status).toBe(503);
      expect(Number(headers['retry-after'])).toBeGreaterThan(0);
      expect(items.length).toBeGreaterThan(0);
      for (const item of items) {
        expect(item.type).toBe('insufficientStorage');
        expect(item.message).toMatch(/refuses writes: (no space left|an I\/O error|the disk took only part|the LMDB file reached)/);
      }
    };

    /** One round of writes: a bulk of 200 location events, a PUT of one, a PUT of a vehicle. Returns how many were refused. */
    const round = async (s: EmbeddedService): Promise<number> => {
      let refused = 0;
      const docs = Array.from({ length: 200 }, () => LOCATION(next++));
      const b = await bulk(s, docs);
      if (b.statusCode === 200) for (const d of docs) acknowledged.set(d.id, 'events');
      else {
        const body = b.json<{ accepted: number; rejected: number; items: Array<{ index: number; id?: string; errors?: [] }> }>();
        expect(b.statusCode).toBe(503);
        expect(Number(b.headers['retry-after'])).toBeGreaterThan(0);
        for (const item of body.items) {
          if (item.id !== undefined) acknowledged.set(item.id, 'events');
          else expectRefusal(503, b.headers, item.errors!);
        }
        refused += body.rejected;
      }
      for (const [kind, doc] of [
        ['events', LOCATION(next++)],
        ['vehicles', VEHICLE(next++)],
      ] as const) {
        const r = await put(s, kind, doc);
        if (r.statusCode === 200) acknowledged.set(r.json<{ id: string }>().id, kind);
        else {
          expectRefusal(r.statusCode, r.headers, r.json());
          refused++;
        }
      }
      return refused;
    };

    const readyz = async (s: EmbeddedService) => {
      const r = await s.app.inject('/readyz');
      return { status: r.statusCode, body: r.json<{ down?: Array<{ name: string; kind: string; reason: string }> }>() };
    };

    const unreadable = async (s: EmbeddedService) => {
      const missing: string[] = [];
      for (const [id, kind] of acknowledged) if ((await get(s, kind, id)).statusCode !== 200) missing.push(id);
      return missing;
    };

    it('refuses what does not fit with 503 and Retry-After, says so in /readyz and /metrics, and takes writes again once there is room', async () => {
      disk = canMount ? tmpfsDisk() : injectedDisk();
      const s = await start();
      // Room for a while, then none: on the tmpfs the writes themselves fill it.
      for (let i = 0; i < 3; i++) expect(await round(s)).toBe(0);
      if (!canMount) disk.fill();
      let refusedRounds = 0;
      for (let i = 0; i < 400 && refusedRounds < 3; i++) refusedRounds = (await round(s)) > 0 ? refusedRounds + 1 : 0;
      expect(refusedRounds).toBe(3);

      // A store is down, named, with the folder and its free bytes.
      const ready = await readyz(s);
      expect(ready.status).toBe(503);
      expect(ready.body.down).toEqual(
        expect.arrayContaining([
          expect.objectContaining({
            name: expect.stringMatching(/^store (event-log|lmdb)$/),
            kind: 'store',
            reason: expect.stringMatching(/ free\)/),
          }),
        ]),
      );
      // Not a stall: /healthz stays green (a restart would not free the disk).
      expect((await s.app.inject('/healthz')).statusCode).toBe(200);
      const metrics = (await s.app.inject('/metrics')).body;
      expect(metrics).toMatch(/^otm_writes_refused_total\{store="(event-log|lmdb)",cause="[a-z-]+"\} [1-9]/m);
      expect(metrics).toMatch(new RegExp(`^otm_data_free_bytes\\{folder="${disk.dataDir.replace(/[/.]/g, '\\$&')}"\\} \\d+`, 'm'));
      // Reads are served; a DELETE is refused like a write.
      const [someId] = [...acknowledged].find(([, kind]) => kind === 'events')!;
      expect((await get(s, 'events', someId)).statusCode).toBe(200);
      const del = await s.app.inject({ method: 'DELETE', url: `/api/v5/events/${someId}`, headers: auth() });
      expectRefusal(del.statusCode, del.headers, del.json());
      expect((await get(s, 'events', someId)).statusCode).toBe(200);

      // Room again: green by itself (the stores' probes), and writes are taken.
      disk.free();
      await vi.waitFor(async () => expect((await readyz(s)).body.down ?? []).toEqual([]), { timeout: 30_000, interval: 200 });
      expect(await round(s)).toBe(0);
      expect(await unreadable(s)).toEqual([]);
    }, 120_000);

    it('starts on the full disk, serves reads, refuses writes, and loses none of the acknowledged ones', async () => {
      expect(acknowledged.size).toBeGreaterThan(600);
      disk!.fill();
      const { logger, lines } = capturingLogger();
      const s = await start(logger);
      // Reads: every acknowledged document.
      expect(await unreadable(s)).toEqual([]);
      // Writes: refused, and a start message naming the folder and its free bytes.
      const r = await put(s, 'events', LOCATION(next++));
      expectRefusal(r.statusCode, r.headers, r.json());
      expect((await readyz(s)).status).toBe(503);
      const folder = disk!.dataDir.replace(/[/.]/g, '\\$&');
      expect(lines.join('\n')).toMatch(new RegExp(`the data folder ${folder} has \\d[\\d.]* (bytes|KiB|MiB) free: writes are refused`));
      expect(lines.join('\n')).toMatch(new RegExp(`cannot write in ${folder}/(events|store) \\(\\d[\\d.]* (bytes|KiB|MiB) free\\)`));
      disk!.free();
      await vi.waitFor(async () => expect((await readyz(s)).body).toMatchObject({ status: 'ready' }), { timeout: 30_000, interval: 200 });
      expect(await round(s)).toBe(0);
      await svc!.close();
      svc = undefined;
      // And after a restart with room: every acknowledged write, none lost.
      const again = await start();
      expect(await unreadable(again)).toEqual([]);
    }, 120_000);
  },
);
