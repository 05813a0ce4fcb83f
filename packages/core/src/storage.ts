/**
 * A store that refuses writes for lack of room: a full disk or quota, an I/O error from a commit
 * (LMDB reports a short write as EIO), LMDB's map full, Redis at `maxmemory` with `noeviction`,
 * ClickHouse out of space or with too many parts. Each adapter turns such a failure into a
 * `StorageRefused` at its edge (an AdapterError that is retryable: the same write succeeds once
 * there is room), marks its store's write state down (`WriteState`: /readyz names it) and counts it
 * (otm_writes_refused_total). The HTTP edge answers it with `insufficientStorage`: 503 with
 * Retry-After, an item of type `insufficientStorage` naming the cause in plain words.
 *
 * Why 503 and not 507: the condition passes (space is freed, the store compacts, memory is
 * released), and every HTTP client, proxy and retry policy knows 503 + Retry-After as "come back
 * later"; 507 is WebDAV's, which generic clients treat as a plain 5xx fault and do not retry, and
 * Retry-After has no meaning on it. The item's `type` tells the two causes of a 503 apart.
 */
import { AdapterError, OtmServiceError } from './errors.js';
import { PartState } from './health.js';
import { writesRefused } from './metrics.js';

/** Why a store refused a write for lack of room. */
export type RefusalCause = 'no-space' | 'quota' | 'io' | 'short-write' | 'map-full' | 'out-of-memory' | 'too-many-parts';

/** The cause in plain words, for an answer, a log line or /readyz. */
export const REFUSAL_TEXT: Readonly<Record<RefusalCause, string>> = {
  'no-space': 'no space left on the disk',
  quota: 'the disk quota is used up',
  io: 'an I/O error from the disk (LMDB reports a write the disk could not take whole, most often a full disk, as one)',
  'short-write': 'the disk took only part of a write (most often a full disk)',
  'map-full': "the LMDB file reached its map size (LMDB's MDB_MAP_FULL)",
  'out-of-memory': "the store is out of memory (Redis at maxmemory with the 'noeviction' policy)",
  'too-many-parts': 'the store has too many parts to merge and refuses inserts for now (ClickHouse TOO_MANY_PARTS)',
};

/** Seconds a client is told to wait before it sends a write refused for lack of room again. */
export const STORAGE_RETRY_AFTER_SECONDS = 30;

/** A write a store refused for lack of room: retryable, nothing of it was stored. */
export class StorageRefused extends AdapterError {
  constructor(
    /** The store, as its write state names it (`lmdb`, `event-log`, `redis`, `clickhouse`); also the AdapterError's adapter. */
    readonly store: string,
    readonly refusal: RefusalCause,
    message: string,
    cause?: unknown,
  ) {
    super(store, message, { retryable: true, cause });
    this.name = 'StorageRefused';
  }
}

/** The answer to a write refused for lack of room: 503, Retry-After, the model's error array naming the cause. */
export const insufficientStorage = (message: string, retryAfterSeconds = STORAGE_RETRY_AFTER_SECONDS, cause?: unknown) =>
  new OtmServiceError('insufficientStorage', 503, message, {
    items: [{ type: 'insufficientStorage', message }],
    retryable: true,
    cause,
    headers: { 'retry-after': String(retryAfterSeconds) },
  });

/** The HTTP answer of a StorageRefused, naming the store and the cause. */
export const storageAnswer = (e: StorageRefused): OtmServiceError =>
  insufficientStorage(
    `not stored: store ${e.store} refuses writes: ${e.message}; nothing of this write was kept, send it again later`,
    undefined,
    e,
  );

/** errno codes (Node's names and LMDB's numbers) of a failed file write that more room would cure. */
const ERRNO: ReadonlyMap<string | number, RefusalCause> = new Map<string | number, RefusalCause>([
  ['ENOSPC', 'no-space'],
  [28, 'no-space'],
  ['EDQUOT', 'quota'],
  [122, 'quota'],
  ['EFBIG', 'no-space'],
  [27, 'no-space'],
  ['EIO', 'io'],
  [5, 'io'],
  // MDB_MAP_FULL
  [-30792, 'map-full'],
  // Ours: a write(2) that returned fewer bytes than it was given (the embedded event log).
  ['ESHORTWRITE', 'short-write'],
]);

/**
 * Why a file or LMDB write failed, when more room would cure it: an errno (ENOSPC, EDQUOT, EFBIG,
 * EIO) as Node or LMDB give it (`code`, or the message LMDB's strerror makes), MDB_MAP_FULL.
 * Undefined for anything else (a closed store, a key too long, a bug).
 */
export function fileRefusal(e: unknown): RefusalCause | undefined {
  if (e instanceof StorageRefused) return e.refusal;
  if (e === null || typeof e !== 'object') return undefined;
  const { code, errno } = e as { code?: unknown; errno?: unknown };
  for (const c of [code, typeof errno === 'number' ? -errno : undefined]) {
    if ((typeof c === 'string' || typeof c === 'number') && ERRNO.has(c)) return ERRNO.get(c);
  }
  const message = e instanceof Error ? e.message : '';
  if (/MDB_MAP_FULL/.test(message)) return 'map-full';
  if (/No space left on device/i.test(message)) return 'no-space';
  if (/Disk quota exceeded/i.test(message)) return 'quota';
  if (/Input\/output error/i.test(message)) return 'io';
  return undefined;
}

export interface WriteStateOptions {
  /** Free bytes where the store writes, for the reason /readyz gives (undefined: not known). */
  readonly freeBytes?: () => number | undefined;
  /** Where the store writes, named in the reason. */
  readonly where?: string;
}

/**
 * Whether a store takes writes: a part of kind `store` (core/health.ts), down from a write refused
 * for lack of room until a write succeeds. Counts each refusal by cause (otm_writes_refused_total).
 */
export class WriteState {
  readonly part: PartState;
  /** The last refusal's cause while down. */
  private cause: RefusalCause | undefined;

  constructor(
    /** The store's name: `lmdb`, `event-log`, `redis`, `clickhouse` (the part is `store <name>`). */
    readonly store: string,
    private readonly opts: WriteStateOptions = {},
  ) {
    this.part = new PartState(`store ${store}`, 'store');
  }

  get refusing(): boolean {
    return !this.part.isUp;
  }

  /** What the store last refused for, while it refuses. */
  get lastCause(): RefusalCause | undefined {
    return this.refusing ? this.cause : undefined;
  }

  /** A write succeeded: the store takes writes. */
  ok(): void {
    if (this.part.isUp) return;
    this.cause = undefined;
    this.part.up();
  }

  /** A write was refused for `cause`: counted, and the store is down until a write succeeds. */
  refused(cause: RefusalCause, detail?: string): void {
    writesRefused.inc({ store: this.store, cause });
    this.unable(cause, detail);
  }

  /** The store cannot write for `cause` (found by a probe, or at start): down, but no write is counted as refused. */
  unable(cause: RefusalCause, detail?: string): void {
    this.cause = cause;
    this.part.down(this.reasonFor(cause, detail));
  }

  private reasonFor(cause: RefusalCause, detail?: string): string {
    const free = this.opts.freeBytes?.();
    const where = this.opts.where === undefined ? '' : ` in ${this.opts.where}`;
    const room = free === undefined ? '' : ` (${formatBytes(free)} free)`;
    return `refuses writes: ${REFUSAL_TEXT[cause]}${where}${room}${detail === undefined ? '' : `: ${detail}`}; up again once a write succeeds`;
  }

  /** A StorageRefused for `cause`, the state marked down. */
  refuse(cause: RefusalCause, message: string, err?: unknown): StorageRefused {
    this.refused(cause);
    const free = this.opts.freeBytes?.();
    const where = this.opts.where === undefined ? '' : ` in ${this.opts.where}`;
    const room = free === undefined ? '' : `, ${formatBytes(free)} free`;
    return new StorageRefused(this.store, cause, `${REFUSAL_TEXT[cause]}${where}${room} (${message})`, err);
  }
}

/** Bytes in a unit a person reads at a glance (1 KiB = 1024 bytes). */
export function formatBytes(n: number): string {
  if (n < 1024) return `${n} bytes`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return `${v >= 100 ? Math.round(v) : v.toFixed(1)} ${units[u]}`;
}
