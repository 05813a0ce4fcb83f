/**
 * How requests arrive and their bodies are read: a request Node's HTTP parser refuses, or that
 * does not arrive in time, answered with the model's error array before the connection closes; a
 * transfer or content coding the route does not read, a charset other than UTF-8, a missing Host,
 * refused before the body is read (415, 400); JSON bodies parsed strictly (UTF-8, a bounded depth),
 * their bytes kept beside the value; an `Expect` the service does not meet (417); an idle
 * connection closed. A plugin of the root (fastify-plugin); `clientErrorHandler` is given to
 * Fastify itself (app.ts).
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { ConnectionError, FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { invalidDocument, parseJsonBody, type ConnectionLimits, type ErrorItem } from '@otm/core';
import { BODY_ANSWERS } from './answers.js';
import { JSON_TYPE, send } from './errors.js';
import { clip, contentCodings, jsonMediaType } from './params.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** A JSON body as it came (bytes, and the text decoded from them), beside its parsed value in `body`. */
    sentBody: { readonly bytes: Buffer; readonly text: string } | undefined;
  }
  interface FastifyContextConfig {
    /**
     * The content codings (lower case, e.g. `['gzip']`) the route decodes itself. A request with
     * any other `Content-Encoding` than these or `identity` gets 415 before its body is read.
     */
    contentEncodings?: readonly string[];
    /** A POST that reads no body: an empty one is fine, whatever its Content-Type. */
    bodyless?: boolean;
  }
}

/** A whole HTTP/1.1 answer with the model's error array, for a socket no response object stands for; the connection then closes. */
export function rawAnswer(status: number, item: ErrorItem): string {
  const body = JSON.stringify([item]);
  return (
    `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? ''}\r\nContent-Type: ${JSON_TYPE}\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

/** The answer to a request Node's HTTP parser refused, or that did not arrive in time. */
export function clientErrorAnswer(err: ConnectionError & { reason?: string }, limits: ConnectionLimits): [number, ErrorItem] {
  switch (err.code) {
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return [
        408,
        {
          type: 'requestTimeout',
          message: `the request did not arrive in time: its headers must come within ${limits.headersTimeoutMs} ms and the whole request within ${limits.requestTimeoutMs} ms`,
        },
      ];
    case 'HPE_HEADER_OVERFLOW':
      return [
        431,
        { type: 'headersTooLarge', message: `the request line and headers are larger than the limit of ${http.maxHeaderSize} bytes` },
      ];
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return [413, { type: 'payloadTooLarge', message: 'the chunk extensions of the body are too large' }];
    case 'HPE_PAUSED_H2_UPGRADE':
      return [400, { type: 'invalidJson', message: 'the service speaks HTTP/1.1 only' }];
    default: {
      const reason =
        typeof err.reason === 'string' && err.reason !== '' ? ` (${clip(err.reason.charAt(0).toLowerCase() + err.reason.slice(1))})` : '';
      return [400, { type: 'invalidJson', message: `the request is not valid HTTP/1.1${reason}` }];
    }
  }
}

/** Transfer codings the service reads: Node's parser decodes `chunked`; `identity` changes nothing. */
function readableTransferCodings(value: string): boolean {
  if (value === 'chunked') return true;
  return value.split(',').every((c) => {
    const coding = c.trim().toLowerCase();
    return coding === 'chunked' || coding === 'identity';
  });
}

/**
 * The refusal of a request whose body the service cannot read as sent: a transfer coding other
 * than chunked, a content coding the route does not decode, a JSON body in another charset than
 * UTF-8; or of an HTTP/1.1 request without Host. Undefined when none applies.
 */
function framingRefusal(req: FastifyRequest): [number, ErrorItem] | undefined {
  const headers = req.headers;
  const te = headers['transfer-encoding'];
  if (te !== undefined && !readableTransferCodings(te)) {
    return [
      415,
      {
        type: 'unsupportedMediaType',
        message: `Transfer-Encoding '${clip(te)}' is not supported: send the body as it is, with a Content-Length or chunked`,
      },
    ];
  }
  const ce = headers['content-encoding'];
  if (ce !== undefined) {
    const codings = contentCodings(ce);
    const accepted = req.routeOptions.config?.contentEncodings ?? [];
    if (codings.length > 1 || (codings.length === 1 && !accepted.includes(codings[0]!))) {
      const allowed = accepted.length === 0 ? 'send the body without a content coding' : `use ${accepted.join(' or ')}, or none`;
      return [415, { type: 'unsupportedMediaType', message: `Content-Encoding '${clip(ce)}' is not supported here: ${allowed}` }];
    }
  }
  const ct = headers['content-type'];
  if (ct !== undefined && req.method !== 'GET' && req.method !== 'HEAD' && jsonMediaType(ct) === 'unsupported-charset') {
    return [415, { type: 'unsupportedMediaType', message: `the body must be UTF-8 (charset=utf-8, or no charset), got '${clip(ct)}'` }];
  }
  if (headers.host === undefined && req.raw.httpVersion === '1.1') {
    return [400, { type: 'invalidJson', message: 'an HTTP/1.1 request needs a Host header' }];
  }
  return undefined;
}

/** Strict UTF-8: a body that is not UTF-8 is refused, never read with replacement characters. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export interface FramingOptions {
  readonly limits: ConnectionLimits;
  readonly bodyLimit: number;
  readonly maxDepth: number;
}

export const framing = fp<FramingOptions>(
  // eslint-disable-next-line @typescript-eslint/require-await -- a fastify plugin without a `done` callback is an async function
  async (app: FastifyInstance, opts) => {
    const { limits } = opts;
    const server = app.server;
    server.maxConnections = limits.maxConnections;
    // Nothing moved on a connection for OTM_IDLE_TIMEOUT_MS: close it, unless the whole request came
    // and its answer has not begun (the service, not the client, is taking its time).
    server.on('timeout', (socket: Socket) => {
      const res = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
      if (res != null && res.req.complete && !res.headersSent) return;
      socket.destroy();
    });
    // `Expect` other than 100-continue (which Node answers itself).
    server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
      const body = JSON.stringify([
        { type: 'expectationFailed', message: `the service meets only 'Expect: 100-continue', got '${clip(String(req.headers.expect))}'` },
      ] satisfies ErrorItem[]);
      res.writeHead(417, { 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(body), connection: 'close' }).end(body);
    });

    app.decorateRequest('sentBody', undefined);
    // A route that reads a body declares it: the answers to a body it cannot read are its own too.
    app.addHook('onRoute', (route: RouteOptions) => {
      const schema = route.schema as (Record<string, unknown> & { body?: unknown; response?: Record<string, unknown> }) | undefined;
      if (schema?.body === undefined) return;
      const own = schema.response ?? {};
      const response: Record<string, unknown> = { ...own };
      for (const [status, answer] of Object.entries(BODY_ANSWERS)) if (!(status in own)) response[status] = answer;
      route.schema = { ...schema, response };
    });

    // Only JSON is accepted, with or without parameters (a charset other than UTF-8 is refused by
    // the onRequest hook below); any other content type, NDJSON too, gets the framework's 415, mapped
    // below. The bulk route has parsers of its own, NDJSON among them.
    app.removeAllContentTypeParsers();
    // The body's bytes and text stay with the request (`sentBody`): the ingress may store a document
    // as the bytes it was sent as (services/ingress/src/item-bytes.ts). A leading byte order mark is
    // dropped from both.
    app.addContentTypeParser(
      /^application\/([a-z0-9.-]+\+)?json(;|$)/i,
      { parseAs: 'buffer', bodyLimit: opts.bodyLimit },
      (req, body, done) => {
        let bytes = body as Buffer;
        // A GET or DELETE sent with a JSON content type but no body has nothing to parse.
        if (bytes.length === 0 && ((req.method !== 'PUT' && req.method !== 'POST') || req.routeOptions.config?.bodyless === true)) {
          return done(null, undefined);
        }
        if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) bytes = bytes.subarray(3);
        let text: string;
        try {
          text = utf8.decode(bytes);
        } catch {
          return done(invalidDocument([{ type: 'invalidJson', message: 'the body is not valid UTF-8' }]), undefined);
        }
        try {
          const value = parseJsonBody(text, opts.maxDepth);
          req.sentBody = { bytes, text };
          done(null, value);
        } catch (e) {
          done(e as Error, undefined);
        }
      },
    );

    // Callback style (not async): no promise per request on the hot path. Most requests carry none
    // of the headers looked at, or only a plain JSON content type.
    app.addHook('onRequest', (req: FastifyRequest, reply: FastifyReply, done: () => void) => {
      const h = req.headers;
      if (h['transfer-encoding'] === undefined && h['content-encoding'] === undefined && h.host !== undefined) {
        const ct = h['content-type'];
        if (ct === undefined || ct === 'application/json') return done();
      }
      const refusal = framingRefusal(req);
      if (refusal === undefined) return done();
      send(reply, refusal[0], [refusal[1]]);
    });
  },
  { name: 'otm-framing', dependencies: ['otm-error-answers'] },
);
