/** The text of a thrown value, for logs and error messages of the adapters. */
export const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));
