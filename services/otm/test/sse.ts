/// <reference path="../../../vitest.context.d.ts" />
/**
 * For the stream suite (stream.test.ts): a Server-Sent Events client over node:http with a small
 * parser (the format of the HTML standard, "Server-sent events": lines, `field: value`, a blank
 * line ends an event, `:` a comment), and the service it runs against: the embedded one listening
 * on loopback (SSE needs a real socket, not `app.inject`), or the distributed deployment.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { createLogger, parseTokens } from '@otm/core';
import { createEmbeddedService } from '../src/index.js';
import { TOKENS, target } from './helpers.js';

export interface SseEvent {
  readonly id: string | undefined;
  readonly event: string;
  readonly data: string;
}

/** Parses a stream of SSE text: `push` chunks, get events and comments as they complete. */
export class SseParser {
  private rest = '';
  private data: string[] = [];
  private event = '';
  private id: string | undefined;
  private lastId: string | undefined;
  retry: number | undefined;

  constructor(
    private readonly onEvent: (e: SseEvent) => void,
    private readonly onComment: (text: string) => void = () => {},
  ) {}

  push(chunk: string): void {
    const text = this.rest + chunk;
    const lines = text.split(/\r\n|\r|\n/);
    // The last piece has no line end yet (a lone \r at the end could be half of \r\n: kept too).
    this.rest = lines.pop() ?? '';
    for (const line of lines) this.line(line);
  }

  private line(line: string): void {
    if (line === '') {
      if (this.data.length > 0) {
        this.lastId = this.id ?? this.lastId;
        this.onEvent({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
      }
      this.data = [];
      this.event = '';
      this.id = undefined;
      return;
    }
    if (line.startsWith(':')) return this.onComment(line.slice(1).trim());
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id' && !value.includes('\0')) this.id = value;
    else if (field === 'retry' && /^\d+$/.test(value)) this.retry = Number(value);
  }
}

/** An open stream: its answer's status and headers, the events and comments received so far. */
export interface SseStream {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  /** The body, for an answer that is not a stream (an error). */
  readonly body: string;
  readonly events: SseEvent[];
  readonly comments: string[];
  readonly retry: () => number | undefined;
  /** The id of the last event that had one. */
  lastId(): string | undefined;
  /** Waits until `ok(events)` holds (or fails after `ms`, saying what came). */
  until(ok: (events: SseEvent[]) => boolean, ms?: number, what?: string): Promise<SseEvent[]>;
  /** Resolves when the server ends the stream. */
  readonly ended: Promise<void>;
  close(): void;
}

export function openStream(base: string, pathAndQuery: string, headers: Record<string, string> = {}): Promise<SseStream> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${base}${pathAndQuery}`, { headers: { accept: 'text/event-stream', ...headers } }, (res) => {
      const events: SseEvent[] = [];
      const comments: string[] = [];
      let body = '';
      const waiters = new Set<() => void>();
      const poke = () => waiters.forEach((w) => w());
      const parser = new SseParser(
        (e) => {
          events.push(e);
          poke();
        },
        (c) => {
          comments.push(c);
          poke();
        },
      );
      let endedResolve!: () => void;
      const ended = new Promise<void>((r) => (endedResolve = r));
      let isEnded = false;
      const end = () => {
        isEnded = true;
        endedResolve();
        poke();
      };
      res.setEncoding('utf8');
      const streaming = res.statusCode === 200 && String(res.headers['content-type']).startsWith('text/event-stream');
      res.on('data', (chunk: string) => (streaming ? parser.push(chunk) : (body += chunk)));
      res.on('end', end);
      res.on('close', end);
      res.on('error', end);
      const stream: SseStream = {
        status: res.statusCode ?? 0,
        headers: res.headers,
        get body() {
          return body;
        },
        events,
        comments,
        retry: () => parser.retry,
        lastId: () => [...events].reverse().find((e) => e.id !== undefined)?.id,
        until: (ok, ms = 15_000, what = 'events') =>
          new Promise((res2, rej2) => {
            const check = () => {
              if (ok(events)) {
                cleanup();
                res2(events);
              } else if (isEnded) {
                cleanup();
                rej2(new Error(`the stream ended before ${what}: ${JSON.stringify(events.map((e) => [e.id, e.event]))}`));
              }
            };
            const timer = setTimeout(() => {
              cleanup();
              rej2(
                new Error(
                  `${what} not seen within ${ms} ms; got ${JSON.stringify(events.map((e) => [e.id, e.event, e.data.slice(0, 80)]))}`,
                ),
              );
            }, ms);
            const cleanup = () => {
              clearTimeout(timer);
              waiters.delete(check);
            };
            waiters.add(check);
            check();
          }),
        ended,
        close: () => {
          req.destroy();
          res.destroy();
        },
      };
      if (streaming) resolve(stream);
      else res.on('end', () => resolve(stream));
    });
    req.on('error', reject);
  });
}

/** What the stream suite runs against. */
export interface StreamService {
  readonly url: string;
  /** Streams a token may hold open (OTM_STREAMS_PER_TOKEN as the service was started with). */
  readonly perToken: number;
  /** How often heartbeats come (ms) at most. */
  readonly heartbeatMs: number;
  readonly distributed: boolean;
  close(): Promise<void>;
}

export async function startStreamService(): Promise<StreamService> {
  const perToken = 3;
  if (target() === 'distributed') {
    const { startCluster } = await import('../../../test/distributed/cluster.js');
    // The idle timeout bounds the heartbeat (at most half of it): 2 s makes it 1 s.
    const cluster = await startCluster({ tokens: TOKENS, env: { OTM_STREAMS_PER_TOKEN: String(perToken), OTM_IDLE_TIMEOUT_MS: '2000' } });
    return { url: cluster.url, perToken, heartbeatMs: 1_000, distributed: true, close: () => cluster.close() };
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'otm-stream-'));
  const svc = await createEmbeddedService(
    { dataDir, bodyLimit: 1_048_576, maxDepth: 64, streams: { perToken, heartbeatMs: 300, pollMs: 20 } },
    parseTokens(TOKENS),
    createLogger('silent'),
  );
  const url = await svc.app.listen({ port: 0, host: '127.0.0.1' });
  return {
    url,
    perToken,
    heartbeatMs: 300,
    distributed: false,
    close: async () => {
      await svc.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
