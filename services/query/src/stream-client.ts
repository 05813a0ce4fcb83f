/** One open stream (`Client`): what it takes, where its events go, and how it ends. */
import type { KindSegment } from '@otm/model';
import type { SharedChange } from '@otm/core';

/** A stream catching up reads on only once its socket's buffer is below this. */
const CATCH_UP_HIGH_WATER = 1024 * 1024;

/** Where a stream's events go: the HTTP response (its socket), or a stand-in in tests. */
export interface StreamSink {
  write(chunk: Buffer): boolean;
  /** Bytes written but not yet taken by the socket. */
  readonly writableLength: number;
  end(): void;
  destroy(): void;
  once(event: 'drain' | 'close', listener: () => void): unknown;
}

/** Which changes a stream takes; ids as storage keys. */
export interface StreamFilter {
  readonly kinds?: ReadonlySet<KindSegment>;
  /** Changes whose document names this vehicle: the vehicle itself, trips with it as their vehicle, events linked to it. */
  readonly vehicle?: string;
  /** The trip itself, and events linked to it. */
  readonly trip?: string;
}

/** Whether the stream takes the change. */
export function matches(f: StreamFilter, c: SharedChange): boolean {
  if (f.kinds !== undefined && !f.kinds.has(c.entry.kind)) return false;
  if (f.vehicle !== undefined && !c.facts().vehicles.includes(f.vehicle)) return false;
  if (f.trip !== undefined && !c.facts().trips.includes(f.trip)) return false;
  return true;
}

/** One open stream. */
export class Client {
  closed = false;
  /** Its answer's head is written: events may go. */
  started = false;
  /** Handed every change by the tenant's reading (else catching up, or waiting to be). */
  attached = false;
  /** Where it waits for the reading to come by (TenantReader.waitAt). */
  waitingAt: string | undefined;
  /** While the position snapshot is written: changes wait here. */
  private held: Buffer[] | undefined;
  private heldBytes = 0;
  private wake: (() => void) | undefined;

  constructor(
    readonly filter: StreamFilter,
    readonly sink: StreamSink,
    private readonly maxPending: number,
    private readonly onClose: (c: Client) => void,
  ) {}

  get holding(): boolean {
    return this.held !== undefined;
  }

  send(chunk: Buffer): void {
    if (this.closed) return;
    if (this.held !== undefined) {
      this.held.push(chunk);
      this.heldBytes += chunk.length;
      if (this.heldBytes > this.maxPending) this.cutOff();
      return;
    }
    try {
      this.sink.write(chunk);
    } catch {
      // Its socket failed: this stream ends (the client resumes), not the tenant's reading.
      this.cutOff();
      return;
    }
    if (this.sink.writableLength > this.maxPending) this.cutOff();
  }

  hold(): void {
    this.held ??= [];
  }

  release(): void {
    const held = this.held;
    this.held = undefined;
    this.heldBytes = 0;
    if (held !== undefined && held.length > 0) this.send(Buffer.concat(held));
  }

  /** Resolves once its socket took all but CATCH_UP_HIGH_WATER bytes (or it closed). */
  async drained(limit = CATCH_UP_HIGH_WATER): Promise<void> {
    while (!this.closed && this.sink.writableLength > limit) {
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        this.sink.once('drain', resolve);
      });
      this.wake = undefined;
    }
  }

  /** A client that does not read: its connection is closed; it resumes with its Last-Event-ID. */
  cutOff(): void {
    if (this.closed) return;
    this.sink.destroy();
    this.close();
  }

  /**
   * Ends the stream (the service stops): what is written is flushed, unless the client does not
   * read. One not started yet has nothing written: its request is answered by whoever opens it.
   */
  end(): void {
    if (this.closed) return;
    if (this.started) {
      this.sink.end();
      if (this.sink.writableLength > 0) this.sink.destroy();
    }
    this.close();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.held = undefined;
    this.wake?.();
    this.onClose(this);
  }
}
