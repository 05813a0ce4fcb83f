/**
 * The tests' ClickHouse: a current ClickHouse engine (chdb, in-process ClickHouse from npm) behind
 * enough of ClickHouse's HTTP interface for @clickhouse/client, in a Node process of its own, so
 * that a test can freeze it (SIGSTOP), stop it (SIGTERM), kill it (SIGKILL) and start it again on
 * its port and data folder. Started by test/infra/services.ts (`startClickHouse`):
 *
 *   node test/infra/clickhouse-front.mjs <data folder> <port>
 *
 * It prints `listening <port> <version>` on stdout once it takes requests.
 *
 * What it speaks (ClickHouse's own rules):
 * - `GET /ping` and `GET /` answer `Ok.`;
 * - a request's SQL is its `query` URL parameter followed by a newline and the body, or the body
 *   alone (so an INSERT's rows are its body); `param_<name>` values bind the query's
 *   `{name:Type}` placeholders (through `SET param_<name> = '…'`, which ClickHouse parses by the
 *   same rules as the HTTP interface); `database` runs it in that database; any other URL
 *   parameter but `query_id`, `session_id` and the HTTP-only settings is a setting (`SET`);
 *   a SELECT without a FORMAT clause answers TabSeparated (`default_format` otherwise);
 * - answers carry `X-ClickHouse-Query-Id`, `X-ClickHouse-Summary`, `X-ClickHouse-Timezone`; a
 *   failure answers ClickHouse's text (`Code: N. DB::Exception: … (NAME)`) with
 *   `X-ClickHouse-Exception-Code` and the status ClickHouse would give (400, 404 or 500).
 *
 * Its limits (test/infra/README.md): one query at a time (requests queue; chdb binds parameters
 * per process and settings per connection, so running them one after the other keeps each
 * request's own); answers are sent once complete, not streamed; an INSERT's body is read whole;
 * no authentication, sessions, compression, multipart parameters or progress headers; a setting
 * or `database` given in a request also holds for the requests after it that do not name one.
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Session } from 'chdb';

const [dir, portText] = process.argv.slice(2);
if (!dir || !portText) {
  console.error('usage: node clickhouse-front.mjs <data folder> <port>');
  process.exit(2);
}

// Tables are loaded before the first query (a restarted front answers with all its data); 64-bit
// integers are quoted in JSON as a ClickHouse server quotes them by default.
const session = new Session(dir, {
  connectionArgs: ['--async_load_databases=0', '--async_load_system_database=0', '--output_format_json_quote_64bit_integers=1'],
});
const version = session.query('SELECT version()', 'TSV').trim();

/** URL parameters that are not settings. */
const NOT_SETTINGS = new Set(['query', 'query_id', 'session_id', 'database', 'default_format', 'user', 'password']);
/** Settings of ClickHouse's HTTP server that the engine does not know. */
const HTTP_ONLY = new Set([
  'wait_end_of_query',
  'send_progress_in_http_headers',
  'http_headers_progress_interval_ms',
  'http_response_buffer_size',
  'enable_http_compression',
  'http_zlib_compression_level',
  'cancel_http_readonly_queries_on_client_close',
  'compress',
  'decompress',
]);
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A ClickHouse string literal. */
const literal = (s) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/** HTTP status of a ClickHouse error code, as its HTTP interface gives it. */
function statusOf(code) {
  if ([60, 81, 82].includes(code)) return 404; // UNKNOWN_TABLE, UNKNOWN_DATABASE, DATABASE_ALREADY_EXISTS
  if ([62, 6, 27, 38, 41, 47, 53, 72, 117, 130, 456, 457].includes(code)) return 400; // parse, type and parameter errors
  return 500;
}

let queue = Promise.resolve();
/** Runs `fn` after every request queued before it. */
function serialized(fn) {
  const run = queue.then(fn);
  queue = run.then(
    () => undefined,
    () => undefined,
  );
  return run;
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

/** `INSERT INTO table (columns) FORMAT format`: an insert the engine can take its rows for as they are. */
const PLAIN_INSERT =
  /^\s*INSERT INTO ([A-Za-z0-9_.]+)\s*\(([A-Za-z0-9_,\s]+)\)\s*FORMAT (TabSeparated|TSV|JSONEachRow|JSONCompactEachRow)\s*$/i;

/** The statements a request runs: its settings, parameters and database, then its SQL (`body` as text). */
function statements(url, body) {
  const pre = [];
  for (const [k, v] of url.searchParams) {
    if (k.startsWith('param_')) {
      if (!NAME.test(k)) throw Object.assign(new Error(`Code: 36. DB::Exception: Bad parameter name ${k}. (BAD_ARGUMENTS)`), { code: 36 });
      pre.push(`SET ${k} = ${literal(v)}`);
    } else if (!NOT_SETTINGS.has(k) && !HTTP_ONLY.has(k)) {
      if (!NAME.test(k)) throw Object.assign(new Error(`Code: 115. DB::Exception: Unknown setting ${k}. (UNKNOWN_SETTING)`), { code: 115 });
      pre.push(`SET ${k} = ${literal(v)}`);
    }
  }
  const database = url.searchParams.get('database');
  if (database !== null) pre.push(`USE ${NAME.test(database) ? database : literal(database)}`);
  const inUrl = url.searchParams.get('query');
  const sql = inUrl === null ? body : `${inUrl}\n${body}`;
  return { pre, sql, insertWithoutRows: inUrl !== null && /^\s*INSERT\b/i.test(inUrl) && body.trim() === '' };
}

async function handle(req, res) {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const queryId = url.searchParams.get('query_id') ?? randomUUID();
  const headers = { 'X-ClickHouse-Query-Id': queryId, 'X-ClickHouse-Timezone': 'UTC', 'X-ClickHouse-Server-Display-Name': 'chdb' };
  if (url.pathname === '/ping' || (url.pathname === '/' && req.method === 'GET' && !url.searchParams.has('query'))) {
    await readBody(req);
    res.writeHead(200, { 'Content-Type': 'text/plain; charset=UTF-8' }).end('Ok.\n');
    return;
  }
  if (url.pathname !== '/') {
    await readBody(req);
    res.writeHead(404, { 'Content-Type': 'text/plain; charset=UTF-8' }).end(`There is no handle ${url.pathname}\n`);
    return;
  }
  try {
    const raw = await readBody(req);
    const { pre, sql, insertWithoutRows } = statements(url, raw.toString('utf8'));
    const format = url.searchParams.get('default_format') ?? 'TabSeparated';
    const plain = pre.length === 0 ? PLAIN_INSERT.exec(url.searchParams.get('query') ?? '') : null;
    // The rows of a plain insert go to the engine as bytes (no SQL text is made of them).
    const run = plain
      ? () => session.insert({ table: plain[1], columns: plain[2].split(',').map((c) => c.trim()), values: raw, format: plain[3] })
      : () => session.queryAsync([...pre, sql].join(';\n'), { format });
    const result = insertWithoutRows ? undefined : await serialized(run);
    const bytes = result === undefined || plain ? Buffer.alloc(0) : Buffer.from(result.bytes());
    const rows = String(result?.rowsRead ?? 0);
    const summary = { read_rows: rows, read_bytes: String(result?.bytesRead ?? 0), written_rows: '0', written_bytes: '0' };
    res.writeHead(200, { ...headers, 'Content-Type': 'text/plain; charset=UTF-8', 'X-ClickHouse-Summary': JSON.stringify(summary) });
    res.end(bytes);
  } catch (e) {
    const code = typeof e?.clickhouseCode === 'number' ? e.clickhouseCode : typeof e?.code === 'number' ? e.code : 1002;
    const text = String(e?.message ?? e).trim();
    const message = /^Code: \d+\./.test(text) ? text : `Code: ${code}. DB::Exception: ${text}. (UNKNOWN_EXCEPTION)`;
    res.writeHead(statusOf(code), { ...headers, 'Content-Type': 'text/plain; charset=UTF-8', 'X-ClickHouse-Exception-Code': String(code) });
    res.end(`${message} (version ${version})\n`);
  }
}

// Large `param_*` lists travel in the URL: allow request lines of ClickHouse's own limit (1 MiB).
const server = http.createServer({ maxHeaderSize: 1 << 20 }, (req, res) => {
  handle(req, res).catch((e) => {
    if (!res.headersSent) res.writeHead(500);
    res.end(String(e));
  });
});
server.keepAliveTimeout = 10_000;
server.listen({ host: '127.0.0.1', port: Number(portText), exclusive: true }, () => {
  process.stdout.write(`listening ${portText} ${version}\n`);
});
server.on('error', (e) => {
  console.error(`clickhouse-front: ${e.message}`);
  process.exit(1);
});

/** SIGTERM: no new connections, the queued requests finish, the engine closes its data folder. */
process.on('SIGTERM', () => {
  server.close();
  server.closeIdleConnections();
  void queue.then(() => {
    server.closeAllConnections();
    session.close();
    process.exit(0);
  });
});
