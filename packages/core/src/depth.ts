/** Whether `value` nests arrays and objects deeper than `limit` levels. */
export function exceedsDepthOf(value: unknown, limit: number): boolean {
  // Iterative, so that a hostile document cannot exhaust the stack.
  const stack: Array<[unknown, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    if (depth > limit) return true;
    if (Array.isArray(v)) {
      for (const item of v) if (item !== null && typeof item === 'object') stack.push([item, depth + 1]);
    } else {
      for (const key in v) {
        const item = (v as Record<string, unknown>)[key];
        if (item !== null && typeof item === 'object') stack.push([item, depth + 1]);
      }
    }
  }
  return false;
}
