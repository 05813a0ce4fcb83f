/**
 * The 13 kinds' path segments (`PUT /api/v5/<segment>`), in the model's order, and nothing else:
 * no schema, no validator. For code that must stay small, such as the fleet page's bundle, which
 * imports `@otm/model/kind-names` alone. `KINDS` (kinds.ts) describes each kind in full; the
 * compiler checks below that both name the same kinds.
 */
import type { KindSegment } from './kinds.js';

export const KIND_SEGMENTS = [
  'vehicles',
  'routes',
  'sensors',
  'locations',
  'actors',
  'consignments',
  'trips',
  'events',
  'actions',
  'goods',
  'documents',
  'transportOrders',
  'constraints',
] as const satisfies readonly KindSegment[];

/** A kind of kinds.ts that this list lacks fails to compile here (`satisfies` above catches the reverse). */
const _everyKind: KindSegment extends (typeof KIND_SEGMENTS)[number] ? true : never = true;
