// ESLint flat configuration: `npm run lint` (with `prettier --check`), `npm run format` fixes.
// TypeScript files get typescript-eslint's type-aware rules through one program over the whole
// tree (tsconfig.eslint.json: sources, tests, vitest.config.ts); JavaScript files (bench, scripts,
// the `otm` bin) the plain rules with Node's globals. Formatting is Prettier's alone.
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import prettier from 'eslint-config-prettier';
import globals from 'globals';
import tseslint from 'typescript-eslint';

const TESTS = ['test/**/*.ts', 'packages/*/test/**/*.ts', 'services/*/test/**/*.ts'];

export default defineConfig(
  {
    ignores: [
      '**/dist/**',
      '**/node_modules/**',
      '**/coverage/**',
      'bench/results/**',
      'packages/model/src/generated/**',
      'data/**',
      '.bench/**',
    ],
  },
  { linterOptions: { reportUnusedDisableDirectives: 'error' } },
  js.configs.recommended,
  {
    rules: {
      // `_` names what is there only to be skipped (an argument, a rest sibling, a drained stream).
      'no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true }],
      // A `let` assigned once but read before, by a callback made earlier (a test's store the hooks reach), stays `let`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
    },
  },
  {
    files: ['**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    // The fleet page (services/web) is browser code with a program of its own: its tsconfig.json.
    ignores: ['services/web/**'],
    languageOptions: {
      parserOptions: {
        project: './tsconfig.eslint.json',
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none', ignoreRestSiblings: true },
      ],
      // Passing on a caught error (typed unknown) as a rejection is deliberate: it is the error as thrown.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      // vitest.context.d.ts augments vitest's types and is no module to import: a path reference is how it is read.
      '@typescript-eslint/triple-slash-reference': ['error', { path: 'always', types: 'prefer-import', lib: 'always' }],
    },
  },
  {
    files: TESTS,
    rules: {
      // Tests read HTTP answers and stored documents as JSON (`res.json()`: any) and check them with `expect`.
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      // Test doubles implement the Promise-returning ports (Bus, EntityStore...) with async functions that need no await.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs', '**/*.cjs'],
    languageOptions: { globals: { ...globals.node } },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
  },
  {
    files: ['services/web/src/**/*.ts', 'services/web/test/**/*.ts'],
    extends: [tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      globals: { ...globals.browser },
      parserOptions: { project: './services/web/tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
  },
  prettier,
);
