// Flat config: eslint's recommended rules plus typescript-eslint's type-aware ones.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["out/**", "node_modules/**", "*.vsix"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        // node:test's describe/it return promises that the runner itself awaits.
        { allowForKnownSafeCalls: [{ from: "package", name: ["describe", "it"], package: "node:test" }] },
      ],
      "@typescript-eslint/explicit-function-return-type": ["error", { allowExpressions: true }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
      eqeqeq: ["error", "always", { null: "ignore" }],
      curly: "error",
      // The core modules must stay testable without the editor.
      "no-restricted-imports": "off",
    },
  },
  {
    files: ["src/core/**/*.ts", "src/test/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        { paths: [{ name: "vscode", message: "src/core must not depend on the editor." }] },
      ],
    },
  },
);
