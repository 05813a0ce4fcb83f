/**
 * A TCP proxy in front of a Kafka broker that reads the Kafka protocol's framing, for faults the
 * broker itself cannot be asked for: a produce request the broker handled (appended, acknowledged)
 * whose answer never reaches the client, which then sees its connection break and retries.
 *
 * Use with `startKafka({ proxied: true })`: the broker's second listener advertises the proxy's
 * address, so that a client bootstrapping at `proxy.address` is told to connect there again, and
 * every request it makes goes through the proxy.
 *
 * Framing (Kafka protocol): every request and response is an int32 size and that many bytes. A
 * request header starts with api key (int16), api version (int16), correlation id (int32); a
 * response header starts with the correlation id. Produce is api key 0.
 */
import net from 'node:net';

const PRODUCE = 0;

export interface KafkaProxy {
  /** `127.0.0.1:port`, where the proxy listens (the broker's advertised address for it). */
  readonly address: string;
  /** Produce requests seen so far. */
  readonly produceRequests: number;
  /** Produce responses dropped so far. */
  readonly droppedResponses: number;
  /**
   * The next `count` produce responses from the broker are dropped (default 1): each time the
   * client's connection is closed instead, after the broker handled the request.
   */
  dropProduceResponses(count?: number): void;
  close(): Promise<void>;
}

/** One direction's bytes, cut into whole frames. */
class Frames {
  private buf: Buffer = Buffer.alloc(0);
  push(chunk: Buffer): Buffer[] {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    const frames: Buffer[] = [];
    while (this.buf.length >= 4) {
      const size = this.buf.readInt32BE(0);
      if (this.buf.length < 4 + size) break;
      frames.push(this.buf.subarray(0, 4 + size));
      this.buf = this.buf.subarray(4 + size);
    }
    return frames;
  }
}

export async function startKafkaProxy(opts: { listen: string; target: string }): Promise<KafkaProxy> {
  const [listenHost, listenPort] = split(opts.listen);
  const [targetHost, targetPort] = split(opts.target);
  let produceRequests = 0;
  let droppedResponses = 0;
  let toDrop = 0;
  const sockets = new Set<net.Socket>();

  const server = net.createServer((client) => {
    const upstream = net.connect({ host: targetHost, port: targetPort });
    sockets.add(client).add(upstream);
    const apiKeys = new Map<number, number>();
    const requests = new Frames();
    const responses = new Frames();
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('data', (chunk: Buffer) => {
      for (const frame of requests.push(chunk)) {
        const apiKey = frame.readInt16BE(4);
        apiKeys.set(frame.readInt32BE(8), apiKey);
        if (apiKey === PRODUCE) produceRequests++;
        upstream.write(frame);
      }
    });
    upstream.on('data', (chunk: Buffer) => {
      for (const frame of responses.push(chunk)) {
        const correlationId = frame.readInt32BE(4);
        const apiKey = apiKeys.get(correlationId);
        apiKeys.delete(correlationId);
        if (apiKey === PRODUCE && toDrop > 0) {
          toDrop--;
          droppedResponses++;
          close();
          return;
        }
        client.write(frame);
      }
    });
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: listenHost, port: listenPort, exclusive: true }, () => resolve());
  });
  server.unref();

  return {
    address: opts.listen,
    get produceRequests() {
      return produceRequests;
    },
    get droppedResponses() {
      return droppedResponses;
    },
    dropProduceResponses: (count = 1) => {
      toDrop = count;
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function split(hostPort: string): [string, number] {
  const i = hostPort.lastIndexOf(':');
  return [hostPort.slice(0, i), Number(hostPort.slice(i + 1))];
}
