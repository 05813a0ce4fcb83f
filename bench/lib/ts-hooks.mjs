/**
 * Module hooks that let the plain-ESM bench scripts import the repository's TypeScript test
 * helpers (test/infra/services.ts, test/distributed/cluster.ts, test/process.ts,
 * test/fixtures/documents.ts) in place, without tsx: each .ts file is transpiled on load with the
 * repository's own `typescript` (transpileModule, types dropped, nothing type-checked). Files stay
 * where they are, so their `import.meta.url`-relative paths keep working. Registered by
 * lib/register-ts.mjs (`node --import ./bench/lib/register-ts.mjs ...`).
 */
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

export async function resolve(specifier, context, next) {
  // Inside a .ts file, `./x.js` means `./x.ts` (NodeNext convention) when no .js exists.
  if (context.parentURL?.endsWith('.ts') && (specifier.startsWith('./') || specifier.startsWith('../')) && specifier.endsWith('.js')) {
    const js = new URL(specifier, context.parentURL);
    if (!fs.existsSync(fileURLToPath(js))) {
      const tsUrl = new URL(specifier.slice(0, -3) + '.ts', context.parentURL);
      if (fs.existsSync(fileURLToPath(tsUrl))) return { url: tsUrl.href, shortCircuit: true };
    }
  }
  return next(specifier, context);
}

export async function load(url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return next(url, context);
  const source = fs.readFileSync(fileURLToPath(url), 'utf8');
  const out = ts.transpileModule(source, {
    fileName: fileURLToPath(url),
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, sourceMap: false, inlineSourceMap: true },
  });
  return { format: 'module', source: out.outputText, shortCircuit: true };
}
