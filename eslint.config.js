import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', 'data/', 'coverage/', '.tmp*/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        URL: 'readonly',
        setTimeout: 'readonly',
        Buffer: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      // `import { type A } from 'x'` still loads x under verbatimModuleSyntax; `import type` does not.
      '@typescript-eslint/no-import-type-side-effects': 'error',
      // Kysely's values come from src/store/kysely.ts (its CommonJS build, loaded faster): one copy of each
      // class, whatever imports it.
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [
            {
              name: 'kysely',
              message: "import kysely's values from src/store/kysely.ts; only types from 'kysely'",
              allowTypeImports: true,
            },
          ],
        },
      ],
    },
  },
  { files: ['src/store/kysely.ts'], rules: { '@typescript-eslint/no-restricted-imports': 'off' } },
);
