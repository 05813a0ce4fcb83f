/** The page's calls to this service's /api/v5, with the tab's token, and the elements it fills. */
import { errorLine, type ErrorItem } from './format.js';
import { state } from './state.js';

/** The element with this id (the page's markup has it: index.html). */
export const $ = <T extends HTMLElement>(id: string): T => {
  const el = document.getElementById(id);
  if (el === null) throw new Error(`#${id} is missing`);
  return el as T;
};

export async function api(path: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${state.token}`);
  if (init.body !== undefined) headers.set('content-type', 'application/json');
  return fetch(path, { ...init, headers });
}

/** An error answer in one line (its items), or its status when it has no JSON body. */
export async function errorText(res: Response): Promise<string> {
  try {
    return errorLine((await res.json()) as ErrorItem[]);
  } catch {
    return `HTTP ${res.status}`;
  }
}
