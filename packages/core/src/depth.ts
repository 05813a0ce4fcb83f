/**
 * The members of all objects in `value`, at any depth (one for each name), or -1 when `value`
 * nests arrays and objects deeper than `limit` levels. One walk answers both: a bulk item's depth
 * check also gives the member count that tells whether its bytes repeat a name
 * (services/ingress/src/item-bytes.ts).
 */
export function membersWithin(value: unknown, limit: number): number {
  // Iterative, so that a hostile document cannot exhaust the stack; two parallel stacks rather than
  // a pair per object (a bulk body holds tens of thousands of objects).
  const values: object[] = [];
  const depths: number[] = [];
  let members = 0;
  if (value !== null && typeof value === 'object') {
    values.push(value);
    depths.push(1);
  }
  while (values.length > 0) {
    const v = values.pop()!;
    const depth = depths.pop()!;
    if (depth > limit) return -1;
    if (Array.isArray(v)) {
      for (const item of v as unknown[]) {
        if (item !== null && typeof item === 'object') {
          values.push(item);
          depths.push(depth + 1);
        }
      }
    } else {
      for (const key in v) {
        members++;
        const item = (v as Record<string, unknown>)[key];
        if (item !== null && typeof item === 'object') {
          values.push(item);
          depths.push(depth + 1);
        }
      }
    }
  }
  return members;
}

/** Whether `value` nests arrays and objects deeper than `limit` levels. */
export const exceedsDepthOf = (value: unknown, limit: number): boolean => membersWithin(value, limit) < 0;
