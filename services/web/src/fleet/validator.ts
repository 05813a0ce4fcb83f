/** Check a document: POST /api/v5/validate/{kind} checks it as a PUT would, without storing it; the errors listed. */
// The kinds' names alone (no schema, no validator: a few hundred bytes of the bundle).
import { KIND_SEGMENTS } from '@otm/model/kind-names';
import { $, api } from './api.js';
import { count, type ErrorItem } from './format.js';

/** What the answer says: the document follows the model, or its problems. */
async function showResult(res: Response): Promise<void> {
  const out = $('validate-result');
  if (res.ok) {
    out.replaceChildren(Object.assign(document.createElement('p'), { className: 'ok', textContent: 'The document follows the model.' }));
    return;
  }
  let items: ErrorItem[];
  try {
    items = (await res.json()) as ErrorItem[];
  } catch {
    items = [{ type: 'error', message: `HTTP ${res.status}` }];
  }
  const list = document.createElement('ul');
  list.className = 'errors';
  for (const i of items) {
    const li = document.createElement('li');
    if (i.field !== undefined) li.append(Object.assign(document.createElement('code'), { textContent: i.field }), ': ');
    li.append(i.message);
    list.append(li);
  }
  out.replaceChildren(Object.assign(document.createElement('p'), { textContent: `${count(items.length, 'problem')}:` }), list);
}

export function initValidator(): void {
  const kindSelect = $<HTMLSelectElement>('validate-kind');
  for (const k of KIND_SEGMENTS) {
    const option = document.createElement('option');
    option.value = k;
    option.textContent = k;
    kindSelect.append(option);
  }
  kindSelect.value = 'vehicles';
  $<HTMLFormElement>('validate-form').addEventListener('submit', (e) => {
    e.preventDefault();
    void (async () => {
      const body = $<HTMLTextAreaElement>('validate-doc').value;
      await showResult(await api(`/api/v5/validate/${kindSelect.value}`, { method: 'POST', body }));
    })();
  });
}
