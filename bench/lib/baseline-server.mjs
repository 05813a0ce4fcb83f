/**
 * The HTTP ceiling: a bare fastify 5 server (default JSON parser and serializer, no logging, no
 * validation, no storage) answering the service's requests with the same bodies. Started as a
 * child process by bench/run.mjs on 127.0.0.1 and a free port; prints "listening on <url>".
 *
 *   PUT  /api/v5/:kind       parses the JSON body, answers it (re-serialised) with a Location header
 *   GET  /api/v5/:kind/:id   answers the body last given to POST /__get-body (the service's own answer)
 *   POST /api/v5/bulk/:kind  parses the array, answers one {index,id} item per document
 */
import Fastify from 'fastify';

const app = Fastify({ logger: false, bodyLimit: 16 * 1024 * 1024 });
let getBody = '{}';

const auth = (req, reply) => {
  if (!req.headers.authorization?.startsWith('Bearer ')) {
    reply.code(401).send([{ type: 'unauthorized', message: 'no token' }]);
    return false;
  }
  return true;
};

app.addContentTypeParser('text/plain', { parseAs: 'string' }, (_req, body, done) => done(null, body));
app.post('/__get-body', async (req) => {
  getBody = req.body;
  return { ok: true };
});
app.put('/api/v5/:kind', async (req, reply) => {
  if (!auth(req, reply)) return reply;
  const doc = req.body;
  reply.header('location', `/api/v5/${req.params.kind}/${doc.id}`);
  return doc;
});
app.get('/api/v5/:kind/:id', async (req, reply) => {
  if (!auth(req, reply)) return reply;
  reply.type('application/json; charset=utf-8');
  return getBody;
});
app.post('/api/v5/bulk/:kind', async (req, reply) => {
  if (!auth(req, reply)) return reply;
  const items = req.body.map((d, index) => ({ index, id: d.id }));
  return { accepted: items.length, rejected: 0, items };
});

const address = await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`baseline: listening on ${address}\n`);
const close = () => app.close().then(() => process.exit(0));
process.on('SIGTERM', close);
process.on('SIGINT', close);
