/**
 * Swagger UI's own markup (which holds the page's one `main`) adjusted for accessibility
 * (axe-core, docs/web.md):
 * - an operation's path is shown as text, not as a deep link: a link inside the button that opens
 *   the operation is a focusable element inside another (nested-interactive). Deep linking stays
 *   (the address follows the operation opened; a tag's name is still a link);
 * - the close button of the Authorize dialog (an icon alone) and the fields of Try it out (a
 *   parameter's value, a request body: no label of their own) get names, set as they appear.
 *   An example that scrolls (a long one) is made focusable, so that the keyboard can scroll it.
 */
import type { Plugin } from 'swagger-ui-dist/swagger-ui-bundle.js';

export const PlainOperationPaths: Plugin = () => ({
  wrapComponents: {
    DeepLink: (Original, system) => (props: { path?: unknown }) =>
      system.React.createElement(Original, String(props.path).includes('/') ? { ...props, enabled: false } : props),
  },
});

/** Names what Swagger UI left without one under `root`. */
function nameFields(root: HTMLElement): void {
  for (const b of root.querySelectorAll('button.close-modal:not([aria-label])')) b.setAttribute('aria-label', 'Close');
  for (const row of root.querySelectorAll<HTMLElement>('tr[data-param-name]')) {
    const name = `${row.dataset.paramName} (${row.dataset.paramIn} parameter)`;
    for (const field of row.querySelectorAll('input:not([aria-label]), select:not([aria-label]), textarea:not([aria-label])')) {
      field.setAttribute('aria-label', name);
    }
  }
  for (const t of root.querySelectorAll('textarea.body-param__text:not([aria-label])')) t.setAttribute('aria-label', 'Request body');
  // A long example scrolls: the keyboard must reach it (scrollable-region-focusable).
  for (const pre of root.querySelectorAll('.highlight-code > .microlight:not([tabindex])')) {
    if (pre.scrollHeight > pre.clientHeight || pre.scrollWidth > pre.clientWidth) pre.setAttribute('tabindex', '0');
  }
}

/** Names the fields under `root` as Swagger UI renders them: once a frame at most, however many nodes React changed in it. */
export function nameFieldsAsRendered(root: HTMLElement): void {
  let queued = false;
  new MutationObserver(() => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      nameFields(root);
    });
  }).observe(root, { childList: true, subtree: true });
}
