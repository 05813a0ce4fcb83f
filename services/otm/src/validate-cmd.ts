/**
 * `otm validate [--kind <kind>] <file...>`: checks OTM documents offline with the same rules and
 * the same error items as the API. The kind comes from `--kind` or from the document itself
 * (entityType, eventType, actionType). Prints one JSON line per file; exit code 1 if any is invalid.
 */
import fs from 'node:fs';
import { OtmServiceError, loadConfig } from '@otm/core';
import { parseJsonBody } from '@otm/http';
import { detectKind, isKindSegment, validateEntity, KINDS, type KindSegment, type OtmError } from '@otm/model';

export interface FileResult {
  readonly file: string;
  readonly kind: KindSegment | null;
  readonly valid: boolean;
  readonly errors: OtmError[];
}

/** The API's nesting limit (OTM_MAX_DEPTH, default 64), so that both give the same answer. */
const maxDepth = loadConfig({ OTM_MAX_DEPTH: process.env.OTM_MAX_DEPTH }).maxDepth;

export function validateText(file: string, text: string, kind?: KindSegment): FileResult {
  let doc: unknown;
  try {
    doc = parseJsonBody(text, maxDepth);
  } catch (e) {
    if (!(e instanceof OtmServiceError)) throw e;
    return { file, kind: kind ?? null, valid: false, errors: e.items as OtmError[] };
  }
  const k = kind ?? detectKind(doc);
  if (k === undefined) {
    return {
      file,
      kind: null,
      valid: false,
      errors: [
        {
          type: 'invalidField',
          field: '',
          message: `cannot tell the kind of this document; give --kind (${KINDS.map((x) => x.segment).join(', ')})`,
        },
      ],
    };
  }
  const errors = validateEntity(k, doc);
  return { file, kind: k, valid: errors.length === 0, errors };
}

export function runValidate(args: string[], out: (line: string) => void): number {
  let kind: KindSegment | undefined;
  const files: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--kind') {
      const v = args[++i];
      if (v === undefined || !isKindSegment(v)) throw new Error(`--kind must be one of ${KINDS.map((x) => x.segment).join(', ')}`);
      kind = v;
    } else if (a.startsWith('--kind=')) {
      const v = a.slice('--kind='.length);
      if (!isKindSegment(v)) throw new Error(`--kind must be one of ${KINDS.map((x) => x.segment).join(', ')}`);
      kind = v;
    } else {
      files.push(a);
    }
  }
  if (files.length === 0) throw new Error('usage: otm validate [--kind <kind>] <file...>');
  let failed = 0;
  for (const file of files) {
    const text = file === '-' ? fs.readFileSync(0, 'utf8') : fs.readFileSync(file, 'utf8');
    const r = validateText(file, text, kind);
    if (!r.valid) failed++;
    out(JSON.stringify(r));
  }
  return failed === 0 ? 0 : 1;
}
