/**
 * One delivery attempt: a JSON POST of a batch to a subscription's URL with undici, signed, through
 * a connector that applies the SSRF rule (ssrf.ts) to every address it connects to.
 *
 * - Redirects are not followed (`maxRedirections: 0`; undici's `request` follows none anyway without
 *   its redirect interceptor): a 3xx is a failed attempt like any answer that is not 2xx.
 * - Timeouts: `connectMs` to connect (5 s), `answerMs` for the answer's head and then between two
 *   pieces of its body (10 s); the whole attempt never takes longer than connect + 2 × answer.
 * - The answer's body is read up to `maxAnswerBytes` (64 KiB), the rest is dropped with the
 *   connection: a receiver that answers 10 MB costs the dispatcher 64 KiB at most.
 */
import { createHmac } from 'node:crypto';
import net from 'node:net';
import { Agent, buildConnector } from 'undici';
import { RefusedTarget, type TargetRule } from './ssrf.js';

export interface HttpLimits {
  /** Longest wait for the connection (ms, default 5000). */
  readonly connectMs: number;
  /** Longest wait for the answer's head, and between pieces of its body (ms, default 10000). */
  readonly answerMs: number;
  /** Most bytes of an answer's body read (default 65536); the rest is dropped. */
  readonly maxAnswerBytes: number;
}

export const DEFAULT_HTTP_LIMITS: HttpLimits = { connectMs: 5_000, answerMs: 10_000, maxAnswerBytes: 65_536 };

export interface AttemptResult {
  readonly outcome: 'delivered' | 'failed' | 'refused';
  readonly status?: number;
  readonly error?: string;
  readonly durationMs: number;
}

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with the secret>`. */
export function signature(secret: string, body: Buffer, nowSeconds: number): string {
  const mac = createHmac('sha256', secret).update(`${nowSeconds}.`).update(body).digest('hex');
  return `t=${nowSeconds},v1=${mac}`;
}

/** The text of a failure, without undici's internals. */
function describe(e: unknown): string {
  if (e instanceof RefusedTarget) return e.message;
  const err = e as { code?: string; message?: string; cause?: unknown };
  if (err?.cause instanceof RefusedTarget) return err.cause.message;
  switch (err?.code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
      return 'no connection within the connect timeout';
    case 'UND_ERR_HEADERS_TIMEOUT':
      return 'no answer within the answer timeout';
    case 'UND_ERR_BODY_TIMEOUT':
      return 'the answer stalled';
    case 'UND_ERR_SOCKET':
      return `the connection failed: ${err.message ?? ''}`.trim();
    default:
      break;
  }
  const text = err?.message ?? String(e);
  return err?.code !== undefined && !text.includes(err.code) ? `${err.code}: ${text}` : text;
}

const isRefused = (e: unknown): boolean => e instanceof RefusedTarget || (e as { cause?: unknown })?.cause instanceof RefusedTarget;

/** Printable start of an answer's body, for the deliveries list. */
function excerpt(body: Buffer): string {
  const text = body
    .subarray(0, 200)
    .toString('utf8')
    // eslint-disable-next-line no-control-regex -- control characters are what is replaced
    .replace(/[\u0000-\u001f\u007f]+/g, ' ')
    .trim();
  return text === '' ? '' : `: ${text}${body.length > 200 ? '...' : ''}`;
}

/** The HTTP client of one dispatcher: one connection pool per origin, every connection checked by the rule. */
export class WebhookClient {
  private readonly agent: Agent;

  constructor(
    rule: TargetRule,
    private readonly limits: HttpLimits = DEFAULT_HTTP_LIMITS,
  ) {
    const connector = buildConnector({ timeout: limits.connectMs, lookup: rule.lookup });
    this.agent = new Agent({
      headersTimeout: limits.answerMs,
      bodyTimeout: limits.answerMs,
      keepAliveTimeout: 4_000,
      connect: (opts, callback) => {
        // A literal address is not looked up: the rule is applied to it here, before connecting.
        const literal = net.isIP(opts.hostname) === 0 ? undefined : rule.refusal(opts.hostname);
        if (literal !== undefined) {
          callback(new RefusedTarget(literal), null);
          return;
        }
        connector(opts, (err, socket) => {
          if (err !== null) return callback(err, null);
          // The address actually connected to: refused if the rule says so (whatever resolved it).
          const remote = socket.remoteAddress;
          const refusal = remote === undefined ? 'an unknown address' : rule.refusal(remote);
          if (refusal !== undefined) {
            socket.destroy();
            return callback(new RefusedTarget(refusal), null);
          }
          callback(null, socket);
        });
      },
    });
  }

  /** POSTs `body` to `url`; resolves with what happened (never rejects). */
  async post(url: string, body: Buffer, headers: Record<string, string>, signal: AbortSignal): Promise<AttemptResult> {
    const started = performance.now();
    const elapsed = () => Math.round(performance.now() - started);
    // Aborted when `signal` is, or when the whole attempt's time is up. One controller and one timer,
    // both dropped when the attempt ends: `AbortSignal.any` of `AbortSignal.timeout` costs about
    // 20 µs of CPU more a POST (weak references, a signal kept until the collector drops it).
    const all = new AbortController();
    const stop = () => all.abort(signal.reason);
    const timer = setTimeout(
      () => all.abort(new DOMException('the attempt took too long', 'TimeoutError')),
      this.limits.connectMs + 2 * this.limits.answerMs,
    );
    if (signal.aborted) stop();
    else signal.addEventListener('abort', stop, { once: true });
    try {
      const u = new URL(url);
      const res = await this.agent.request({
        origin: u.origin,
        path: `${u.pathname}${u.search}`,
        method: 'POST',
        headers: { ...headers, 'content-length': String(body.length) },
        body,
        signal: all.signal,
        // Redirects are never followed (a 3xx fails the attempt): stated, though undici 7 follows none here.
        ...({ maxRedirections: 0 } as object),
      });
      const status = res.statusCode;
      if (status >= 200 && status < 300) {
        // Read and dropped, at most maxAnswerBytes of it (then the rest goes with the connection):
        // undici's dump, without an async iterator a POST.
        await res.body.dump({ limit: this.limits.maxAnswerBytes }).catch(() => {
          // The status decides; a body cut off or stalled does not.
        });
        return { outcome: 'delivered', status, durationMs: elapsed() };
      }
      // At most maxAnswerBytes of the body, then the rest is dropped with the connection.
      const kept: Buffer[] = [];
      let size = 0;
      try {
        for await (const chunk of res.body) {
          const b = chunk as Buffer;
          size += b.length;
          if (size > this.limits.maxAnswerBytes) {
            res.body.destroy();
            break;
          }
          kept.push(b);
        }
      } catch {
        // The status decides; a body cut off or stalled does not.
      }
      const why = status >= 300 && status < 400 ? ' (redirects are not followed)' : '';
      return { outcome: 'failed', status, error: `HTTP ${status}${why}${excerpt(Buffer.concat(kept))}`, durationMs: elapsed() };
    } catch (e) {
      if (isRefused(e)) return { outcome: 'refused', error: describe(e), durationMs: elapsed() };
      const aborted = signal.aborted ? 'stopped' : all.signal.aborted ? 'no answer in time' : undefined;
      return { outcome: 'failed', error: aborted ?? describe(e), durationMs: elapsed() };
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', stop);
    }
  }

  async close(): Promise<void> {
    await this.agent.destroy();
  }
}
