/** Whether `value` nests arrays and objects deeper than `limit` levels. */
export function exceedsDepthOf(value: unknown, limit: number): boolean {
  // Iterative, so that a hostile document cannot exhaust the stack; two parallel stacks rather than
  // a pair per object (a bulk body holds tens of thousands of objects).
  const values: object[] = [];
  const depths: number[] = [];
  if (value !== null && typeof value === 'object') {
    values.push(value);
    depths.push(1);
  }
  while (values.length > 0) {
    const v = values.pop()!;
    const depth = depths.pop()!;
    if (depth > limit) return true;
    if (Array.isArray(v)) {
      for (const item of v) {
        if (item !== null && typeof item === 'object') {
          values.push(item);
          depths.push(depth + 1);
        }
      }
    } else {
      for (const key in v) {
        const item = (v as Record<string, unknown>)[key];
        if (item !== null && typeof item === 'object') {
          values.push(item);
          depths.push(depth + 1);
        }
      }
    }
  }
  return false;
}
