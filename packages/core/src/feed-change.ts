/**
 * One change of the feed with its document, read once for every reader of its tenant (the
 * stream's clients, the dispatcher's subscriptions: shared-feed.ts): what each reader asks of it,
 * its item, its stream event and the facts filters look at, is made once, when first asked for.
 */
import { changeFacts, parseChangeDocument, type ChangeFacts } from './facets.js';
import { DOCUMENT_MEMBER, changeEvent, changeHead } from './feed-item.js';
import type { FeedEntry } from './ports.js';

export class SharedChange {
  /** Its item up to the document: `{"cursor","op","kind","id","lifecycle"?`, and its length in bytes. */
  private head: string | undefined;
  private headBytes = 0;
  private docBytes = 0;
  private named?: ChangeFacts;
  private sse?: Buffer;

  constructor(
    readonly entry: FeedEntry,
    readonly doc: string | Buffer | undefined,
  ) {}

  private made(): string {
    if (this.head === undefined) {
      // As `changeItem` writes it (tested byte for byte against it).
      ({ head: this.head, headBytes: this.headBytes } = changeHead(this.entry));
      const d = this.doc;
      this.docBytes = d === undefined ? 0 : typeof d === 'string' ? Buffer.byteLength(d) : d.length;
    }
    return this.head;
  }

  /** The length in bytes of its item. */
  itemLength(): number {
    this.made();
    return this.headBytes + (this.doc === undefined ? 0 : DOCUMENT_MEMBER.length + this.docBytes) + 1;
  }

  /** Writes its item into `out` at `at` (room for `itemLength()` bytes); answers where it ends. */
  writeItem(out: Buffer, at: number): number {
    let to = at + out.write(this.made(), at, 'utf8');
    const d = this.doc;
    if (d !== undefined) {
      to += DOCUMENT_MEMBER.copy(out, to);
      to += typeof d === 'string' ? out.write(d, to, 'utf8') : d.copy(out, to);
    }
    out[to] = 0x7d; // '}'
    return to + 1;
  }

  /** The change as a batch (and `GET /api/v5/changes`) carries it: `{"cursor",...,"document"?}`. */
  item(): Buffer {
    const out = Buffer.allocUnsafe(this.itemLength());
    this.writeItem(out, 0);
    return out;
  }

  /** The change as the stream sends it (`changeEvent`), made once for every stream. */
  event(): Buffer {
    return (this.sse ??= changeEvent(this.entry, this.item()));
  }

  /** What the filters look at (facets.ts `changeFacts`), the document parsed once. */
  facts(): ChangeFacts {
    const e = this.entry;
    return (this.named ??= changeFacts(e.kind, e.key, e.kind === 'vehicles' ? undefined : parseChangeDocument(this.doc)));
  }

  /** About the bytes it holds (for the bound of what is kept). */
  get size(): number {
    return 300 + (this.doc === undefined ? 0 : this.doc.length);
  }
}
