/**
 * `runExample(code, url, env)`: run a TypeScript example of the docs as written, against a test server.
 * It is transpiled, its `from "keepstate"` pointed at the built package and its `http://127.0.0.1:8420`
 * at `url`, and imported as a module with `env` set in `process.env`; what it printed with
 * `console.log` comes back.
 */

import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import ts from "typescript";
import { PACKAGE_ROOT } from "./server.js";

export async function runExample(code: string, url: string, env: Record<string, string>): Promise<unknown[]> {
  const entry = pathToFileURL(resolve(PACKAGE_ROOT, "dist/index.js")).href;
  const module = ts.transpileModule(code.replaceAll("http://127.0.0.1:8420", url), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  }).outputText.replace(/from "keepstate"/g, `from ${JSON.stringify(entry)}`);
  const dir = mkdtempSync(join(tmpdir(), "keepstate-example-"));
  const printed: unknown[] = [];
  const log = console.log;
  Object.assign(process.env, env);
  console.log = (...values: unknown[]) => void printed.push(...values);
  try {
    writeFileSync(join(dir, "example.mjs"), module);
    await import(pathToFileURL(join(dir, "example.mjs")).href);
  } finally {
    console.log = log;
    for (const name of Object.keys(env)) delete process.env[name];
    rmSync(dir, { recursive: true, force: true });
  }
  return printed;
}
