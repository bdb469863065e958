// How AIDE's daemon starts arena-ls (its argument list, never a shell) and which addresses are
// this machine's loopback: the Training Room answers on nothing else (moved out of training-arena.mjs).
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** editor-client/aide/, where training-arena.mjs lives (the checkout's .venv is two folders up). */
const HERE = path.dirname(fileURLToPath(new URL("../training-arena.mjs", import.meta.url)));

/** `arena-ls` as an argument list: `ARENA_LS` (a JSON list or one path), the checkout's .venv, else PATH. */
export function defaultArenaCommand(env = process.env) {
  if (env.ARENA_LS) {
    return parseCommand(env.ARENA_LS);
  }
  const venv = path.resolve(HERE, "..", "..", ".venv");
  const checkout = process.platform === "win32" ? path.join(venv, "Scripts", "arena-ls.exe") : path.join(venv, "bin", "arena-ls");
  return existsSync(checkout) ? [checkout] : ["arena-ls"];
}

/** `--arena-ls CMD`: a JSON argument list (`["py","-3.10","-m","arena_ls"]`) or words split on spaces. No shell. */
export function parseCommand(text) {
  const trimmed = String(text).trim();
  if (trimmed.startsWith("[")) {
    const parsed = JSON.parse(trimmed);
    if (!Array.isArray(parsed) || parsed.length === 0 || !parsed.every((part) => typeof part === "string")) {
      throw new TypeError("--arena-ls must be a JSON list of strings");
    }
    return parsed;
  }
  const words = trimmed.split(/\s+/).filter(Boolean);
  if (words.length === 0) {
    throw new TypeError("--arena-ls is empty");
  }
  return words;
}

export function isLoopbackAddress(address) {
  if (typeof address !== "string") {
    return false;
  }
  const plain = address.startsWith("::ffff:") ? address.slice(7) : address;
  return plain === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(plain);
}

export function isLoopbackHostName(host) {
  return host === "localhost" || host === "[::1]" || host === "::1" || isLoopbackAddress(host);
}
