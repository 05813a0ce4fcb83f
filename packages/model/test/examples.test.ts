import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { detectKind, KINDS, validateEntity, type KindSegment } from '../src/index.js';
import { validateAgainst } from '../src/validate.js';

interface Example {
  name: string;
  kind: KindSegment | null;
  valid: boolean;
  note?: string;
  document: unknown;
}
const examples = JSON.parse(readFileSync(new URL('./fixtures/model-examples.json', import.meta.url), 'utf8')) as Example[];

describe('model examples (test/fixtures/model-examples.json)', () => {
  it('has all 59 examples of the model', () => {
    expect(examples).toHaveLength(59);
  });

  it('every kind but consignments has an example document (the model has no consignment example)', () => {
    const kinds = new Set(examples.map((e) => e.kind));
    expect(KINDS.filter((k) => !kinds.has(k.segment)).map((k) => k.segment)).toEqual(['consignments']);
  });

  it('only attachTransportEquipment is an invalid document', () => {
    expect(examples.filter((e) => e.kind !== null && !e.valid).map((e) => e.name)).toEqual(['attachTransportEquipment']);
  });

  for (const e of examples) {
    const label = `${e.name} -> ${e.kind ?? `fragment of schema ${e.name}`} is ${e.valid ? 'valid' : 'invalid'}`;
    it(label, () => {
      const errors = e.kind ? validateEntity(e.kind, e.document) : validateAgainst(e.name, e.document);
      if (e.valid) expect(errors).toEqual([]);
      else expect(errors.length).toBeGreaterThan(0);
    });
  }

  it('attachTransportEquipment: exactly the missing goods type', () => {
    const e = examples.find((x) => x.name === 'attachTransportEquipment');
    expect(validateEntity('actions', e?.document)).toEqual([
      { type: 'missingField', field: 'transportEquipment.entity.type', message: "missing required member 'type' of transportEquipment" },
    ]);
  });

  it('the *-in-events fragments are valid once they carry their entityType (as in an updateEvent)', () => {
    for (const e of examples.filter((x) => x.name.endsWith('-in-events') && x.name !== 'attach-in-events')) {
      const doc = e.document as Record<string, unknown>;
      const entityType =
        { 'handover-in-events': 'handOver', 'generic-in-events': 'genericAction', 'detach-in-events': 'detachTransportEquipment' }[
          e.name
        ] ?? e.name.replace('-in-events', '');
      const event = { eventType: 'updateEvent', entity: { entityType, ...doc } };
      expect(validateEntity('events', event), e.name).toEqual([]);
    }
  });

  it('stop-entity and move-entity are valid as the inline stop / move of other actions', () => {
    const stop = examples.find((x) => x.name === 'stop-entity')?.document;
    const move = examples.find((x) => x.name === 'move-entity')?.document;
    expect(validateEntity('actions', { actionType: 'load', stop: { associationType: 'inline', entity: stop } })).toEqual([]);
    expect(
      validateEntity('actions', { actionType: 'genericAction', description: 'x', move: { associationType: 'inline', entity: move } }),
    ).toEqual([]);
    // without actionType they are not action documents
    expect(validateEntity('actions', stop)[0]).toMatchObject({ type: 'missingField', field: 'actionType' });
  });

  it('detectKind recognises documents with a kind marker', () => {
    for (const e of examples) {
      if (!e.kind) continue;
      const d = e.document as Record<string, unknown>;
      const marked =
        'entityType' in d ||
        'eventType' in d ||
        'actionType' in d ||
        e.kind === 'constraints' ||
        e.kind === 'documents' ||
        e.kind === 'goods';
      if (marked) expect(detectKind(d), e.name).toBe(e.kind);
    }
  });
});
