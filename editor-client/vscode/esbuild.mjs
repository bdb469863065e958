// Bundles the extension into one file, out/extension.js, as the VS Code docs
// recommend: the .vsix then carries one script instead of node_modules.
// `node esbuild.mjs` builds it (minified unless --dev); `vscode` stays external.
import * as esbuild from "esbuild";

const dev = process.argv.includes("--dev");

await esbuild.build({
  entryPoints: ["src/extension.ts"],
  bundle: true,
  outfile: "out/extension.js",
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node18",
  minify: !dev,
  sourcemap: dev,
  logLevel: "warning",
});
