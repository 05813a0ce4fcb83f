/**
 * The model's lifecycles, in order from before execution to after it. An action or event sent again
 * with the same id and another lifecycle is kept beside the earlier one; a read without a lifecycle
 * returns the latest. A document without a lifecycle has rank 0, below every lifecycle.
 */
export const LIFECYCLES = ['requested', 'planned', 'projected', 'actual', 'realized'] as const;
export type Lifecycle = (typeof LIFECYCLES)[number];

export const isLifecycle = (s: unknown): s is Lifecycle => typeof s === 'string' && (LIFECYCLES as readonly string[]).includes(s);

/** 0 for no lifecycle, 1 (requested) to 5 (realized). */
export const lifecycleRank = (s: unknown): number => (isLifecycle(s) ? LIFECYCLES.indexOf(s) + 1 : 0);
