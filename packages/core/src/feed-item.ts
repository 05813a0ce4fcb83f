/**
 * The change feed's item on the wire: `{"cursor","op","kind","id","lifecycle"?,"document"?}`, as
 * `GET /api/v5/changes` lists it, a webhook batch carries it and the stream (`GET /api/v5/stream`)
 * sends it as an event's data. Written by hand from the entry and the document's text as it is,
 * since every reader of the feed makes one a change.
 */
import { LIFECYCLES } from './lifecycle.js';
import type { FeedEntry } from './ports.js';

/** What joins a change's head to its document. */
export const DOCUMENT_MEMBER = Buffer.from(',"document":');

/**
 * One change as `GET /api/v5/changes` and the stream answer it:
 * `{"cursor","op","kind","id","lifecycle"?,"document"?}`, the document's text as it is.
 */
export function changeItem(e: FeedEntry, doc: string | Buffer | undefined): Buffer {
  const { head, headBytes } = changeHead(e);
  if (doc === undefined) return Buffer.from(`${head}}`);
  const body = typeof doc === 'string' ? Buffer.from(doc) : doc;
  const out = Buffer.allocUnsafe(headBytes + DOCUMENT_MEMBER.length + body.length + 1);
  out.write(head, 0, 'utf8');
  DOCUMENT_MEMBER.copy(out, headBytes);
  body.copy(out, headBytes + DOCUMENT_MEMBER.length);
  out[out.length - 1] = 0x7d; // '}'
  return out;
}

/**
 * A change's item up to its document, `{"cursor","op","kind","id","lifecycle"?`, and its length in
 * UTF-8 bytes: written by hand, members in the order JSON.stringify of {cursor, op, kind, id,
 * lifecycle?} gives (op, kind and lifecycle are names; the cursor and the id escaped as it escapes
 * them), since the feed's readers make one for each change, and the object and its stringify cost
 * as much as the rest. When the cursor and the id are plain (isPlainChange) they are written as
 * they are, and the head is as many bytes as characters (no byte count needed).
 */
export function changeHead(e: FeedEntry): { head: string; headBytes: number } {
  const lifecycle =
    e.op === 'put' && e.lifecycleRank !== undefined && e.lifecycleRank > 0 ? `,"lifecycle":"${LIFECYCLES[e.lifecycleRank - 1]}"` : '';
  if (isPlainChange(e)) {
    const head = `{"cursor":"${e.cursor}","op":"${e.op}","kind":"${e.kind}","id":"${e.key}"${lifecycle}`;
    return { head, headBytes: head.length };
  }
  const head = `{"cursor":${JSON.stringify(e.cursor)},"op":"${e.op}","kind":"${e.kind}","id":${JSON.stringify(e.key)}${lifecycle}`;
  return { head, headBytes: Buffer.byteLength(head) };
}

/**
 * Whether the change's cursor and id are printable ASCII without `"` or `\` (UUIDs and numbers:
 * most of them): JSON.stringify would only quote them, and each is a byte a character.
 */
function isPlainChange(e: FeedEntry): boolean {
  return isPlain(e.cursor) && isPlain(e.key);
}

function isPlain(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return false;
  }
  return true;
}

/**
 * The stream's event of a change: `id: <cursor>`, `event: put|delete`, `data: <item>`. A
 * document's text is JSON, where a line break can only stand between tokens: should one be there,
 * the rest goes on a `data:` line of its own (which the client joins with a line break again).
 */
export function changeEvent(e: FeedEntry, item: Buffer): Buffer {
  const data =
    item.includes(0x0a) || item.includes(0x0d)
      ? Buffer.from(
          item
            .toString('utf8')
            .split(/\r\n|\r|\n/)
            .join('\ndata: '),
        )
      : item;
  return Buffer.concat([Buffer.from(`id: ${e.cursor}\nevent: ${e.op}\ndata: `), data, Buffer.from('\n\n')]);
}
